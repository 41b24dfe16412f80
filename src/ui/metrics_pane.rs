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

/// A row's label and value styles.
type Styles = (Style, Style);
/// A headline figure's row (TTFT, decode tok/s).
const KEY: Styles = (theme::METRIC_LABEL, theme::METRIC_KEY_VALUE);
/// A figure's row.
const MAIN: Styles = (theme::METRIC_LABEL, theme::METRIC_VALUE);
/// A sub-figure's row (indented label, plain value).
const SUB: Styles = (theme::METRIC_SUB_LABEL, theme::METRIC_VALUE);
/// A section's first row, its value a plain note.
const HEAD: Styles = (theme::METRIC_LABEL, theme::METRIC_SUB_LABEL);

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
    let mut pieces = pieces(app, view, inner.width as usize);

    // Drop the least important pieces until the minimum heights fit.
    let avail = inner.height as usize;
    while pieces.iter().map(Piece::min_height).sum::<usize>() > avail {
        let Some((worst, _)) = pieces
            .iter()
            .enumerate()
            .max_by_key(|(i, p)| (p.priority, *i))
        else {
            break;
        };
        pieces.remove(worst);
    }
    // Share what is left: the sparkline grows first, then the history shows more turns.
    let mut spare = avail.saturating_sub(pieces.iter().map(Piece::min_height).sum());
    let mut heights: Vec<usize> = pieces.iter().map(Piece::min_height).collect();
    for spark in [true, false] {
        for (p, h) in pieces.iter().zip(heights.iter_mut()) {
            let extra = match &p.content {
                Content::Spark(gaps) if spark && !gaps.is_empty() => SPARK_MAX_ROWS - 1,
                Content::History { rows, .. } if !spark => rows.len().saturating_sub(1),
                _ => continue,
            }
            .min(spare);
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
                let mut lines = vec![header];
                if rows.is_empty() {
                    lines.push(Line::from(Span::styled(
                        "  no finished turn yet",
                        theme::DIM,
                    )));
                }
                lines.extend_from_slice(&rows[rows.len().saturating_sub(h.saturating_sub(1))..]);
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

/// A `label … value` cell `width` columns wide, the value right-aligned.
fn cell(label: &str, value: String, width: usize, (ls, vs): Styles) -> Vec<Span<'static>> {
    let vw = text_width(&value);
    let label = truncate(label, width.saturating_sub(vw + 1));
    let pad = width.saturating_sub(text_width(&label) + vw).max(1);
    vec![
        Span::styled(label, ls),
        Span::raw(" ".repeat(pad)),
        Span::styled(value, vs),
    ]
}

/// A `label … value` row, the value right-aligned to `width`.
fn row(label: &str, value: String, width: usize, styles: Styles) -> Line<'static> {
    Line::from(cell(label, value, width, styles))
}

/// One sub-figure row per `(label, value)`.
fn sub_rows<const N: usize>(items: [(&str, String); N], width: usize) -> Vec<Line<'static>> {
    items
        .into_iter()
        .map(|(l, v)| row(l, v, width, SUB))
        .collect()
}

/// `n` label/value cells on one row, sharing `width` with one column between cells.
fn cells(items: &[(&str, String)], width: usize) -> Line<'static> {
    let n = items.len().max(1);
    let avail = width.saturating_sub(n - 1);
    let mut spans = Vec::new();
    for (i, (label, value)) in items.iter().enumerate() {
        if i > 0 {
            spans.push(Span::raw(" "));
        }
        // The first cells take the columns that do not divide evenly.
        let cw = avail / n + usize::from(i < avail % n);
        spans.extend(cell(label, value.clone(), cw, SUB));
    }
    Line::from(spans)
}

/// `text` in `style`, cut to `w` columns.
fn cut(text: &str, w: usize, style: Style) -> Line<'static> {
    Line::from(Span::styled(truncate(text, w), style))
}

/// `text` in `style`, wrapped to `w` columns.
fn wrapped(text: String, style: Style, w: usize) -> Vec<Line<'static>> {
    wrap(&[Span::styled(text, style)], w, &[], &[])
}

/// A gauge `w` columns wide: `indent`, a bar filled to `fraction` (clamped to 0..=1), `pct`.
fn gauge(indent: &'static str, fraction: f64, pct: String, fill: Style, w: usize) -> Line<'static> {
    let bar_w = w.saturating_sub(pct.len() + indent.len());
    let filled = ((fraction.clamp(0.0, 1.0) * bar_w as f64).round() as usize).min(bar_w);
    let bar = [
        Span::styled("█".repeat(filled), fill),
        Span::styled("░".repeat(bar_w - filled), theme::GAUGE_EMPTY),
        Span::styled(pct, theme::METRIC_VALUE),
    ];
    let indent = (!indent.is_empty()).then(|| Span::raw(indent));
    Line::from(indent.into_iter().chain(bar).collect::<Vec<_>>())
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
        // The loaded model is synthetic: its answers are noise.
        let warning = format!("⚠ {}", ModelInfo::SYNTHETIC_LABEL);
        out.push(Piece::text(0, wrapped(warning, theme::SYNTHETIC, w)));
    }
    let focus = view.focus.as_ref();
    // The answer in focus, by number and phase, or "no answer yet".
    let header = focus.map_or_else(
        || "no answer yet".to_string(),
        |f| format!("turn {} · {}", f.number, phase_word(&f.turn.phase)),
    );
    out.push(Piece::text(1, vec![cut(&header, w, theme::METRIC_HEADER)]));
    out.extend(latency_pieces(view, w));
    out.extend(thinking_piece(focus.map(|f| &f.figures), w));
    out.extend(itl_pieces(focus, w));
    out.extend(speculation_pieces(focus, w));
    out.extend(host_piece(focus, w));
    let turn = focus.map(|f| f.turn);
    for lines in [quality_lines(app, turn, w), confidence_lines(app, turn, w)] {
        out.extend(lines.map(|lines| Piece::text(3, lines)));
    }
    out.push(Piece::text(2, context_lines(view, w)));
    out.push(Piece::text(4, roofline_lines(app, view, w)));
    out.push(history(app, w));
    out
}

/// The waiting clock, TTFT and its breakdown (local stages or a server's), decode speed,
/// TPOT, tokens and E2E.
fn latency_pieces(view: &View, w: usize) -> Vec<Piece> {
    let s = view.focus.as_ref().map(|f| &f.figures);
    let num = |f: fn(&Figures) -> Option<f64>| format::num(s.and_then(f));
    let waiting = view.waiting.map(|waited| {
        let waiting = format::num(Some(ms(waited)));
        Piece::text(1, vec![row("waiting ms", waiting, w, KEY)])
    });
    let breakdown = match s.and_then(|s| s.remote.as_ref()) {
        Some(r) => remote_breakdown(r, w),
        None => ttft_breakdown(s, w),
    };
    let tokens = opt_count(s.map(|s| s.tokens_generated));
    waiting
        .into_iter()
        .chain([
            Piece::text(1, vec![row("TTFT ms", num(|s| s.ttft_ms), w, KEY)]),
            Piece::text(6, breakdown),
            Piece::text(
                1,
                vec![row("decode tok/s", num(|s| s.decode_tok_per_s), w, KEY)],
            ),
            Piece::text(6, vec![row("TPOT ms", num(|s| s.tpot_ms), w, MAIN)]),
            Piece::text(
                3,
                vec![
                    row("tokens", tokens, w, MAIN),
                    row("E2E ms", num(|s| s.e2e_ms), w, MAIN),
                ],
            ),
        ])
        .collect()
}

/// A turn that thought before it answered (docs/metrics.md, "Thinking"): its thinking tokens,
/// whether it still thinks or ended while it did, the thinking's time, the time to the first
/// answer token and the answer's own decode speed (the whole turn's is decode tok/s above).
/// TTFT above stays the first token of any kind. `None` for a turn without thinking.
fn thinking_piece(s: Option<&Figures>, w: usize) -> Option<Piece> {
    let s = s?;
    let th = s.thinking?;
    let mut lines = vec![row(
        "thinking",
        format!("{} tok", th.thinking_tokens),
        w,
        HEAD,
    )];
    let state = if s.still_thinking {
        Some("  still thinking…")
    } else if th.ended_while_thinking {
        Some("  ended while thinking")
    } else {
        None
    };
    lines.extend(state.map(|state| cut(state, w, theme::DIM)));
    lines.extend(sub_rows(
        [
            ("  thinking ms", format::num(th.thinking_ms)),
            ("  1st answer ms", format::num(th.time_to_first_answer_ms)),
            ("  answer tok", th.answer_tokens.to_string()),
            ("  answer tok/s", format::num(th.answer_tok_per_s)),
        ],
        w,
    ));
    Some(Piece::text(2, lines))
}

/// A local turn's TTFT breakdown: queue, template and tokenize, prefill, first sample, and the
/// prompt's prefilled and cached tokens with the prefill speed.
fn ttft_breakdown(s: Option<&Figures>, w: usize) -> Vec<Line<'static>> {
    let num = |f: fn(&Figures) -> Option<f64>| format::num(s.and_then(f));
    let count = |f: fn(&Figures) -> Option<usize>| opt_count(s.and_then(f));
    sub_rows(
        [
            ("  queue ms", num(|s| s.queue_ms)),
            ("  tmpl+tok ms", num(|s| s.template_tokenize_ms)),
            ("  prefill ms", num(|s| s.prefill_ms)),
            ("  first sample ms", num(|s| s.first_sample_ms)),
            ("  prefill tok", count(|s| s.prefilled_tokens)),
            ("  cached tok", count(|s| s.cached_tokens)),
            ("  prefill tok/s", num(|s| s.prefill_tok_per_s)),
        ],
        w,
    )
}

/// ITL: the gap count and percentiles, then the sparkline of the gaps (or why a resumed turn
/// has none).
fn itl_pieces(focus: Option<&Focus>, w: usize) -> [Piece; 2] {
    // ITL: the last gap comes from the timeline, the statistics from the summary.
    let gaps: &[std::time::Duration] = focus.map_or(&[], |f| &f.gaps);
    let itl = focus.and_then(|f| f.figures.itl);
    let count = itl.map_or(0, |i| i.count);
    // A handful of gaps makes p90/p99 the max and the mean a guess: said beside the count.
    let few = if (1..FEW_GAPS).contains(&count) {
        ", few"
    } else {
        ""
    };
    let num = |f: fn(&crate::metrics::LatencyStats) -> f64| format::num(itl.as_ref().map(f));
    let figures = Piece::text(
        2,
        vec![
            row("ITL ms", format!("{count} gaps{few}"), w, HEAD),
            cells(
                &[
                    ("last", format::num(gaps.last().map(|g| ms(*g)))),
                    ("mean", num(|i| i.mean_ms)),
                    ("p50", num(|i| i.p50_ms)),
                ],
                w,
            ),
            cells(
                &[
                    ("p90", num(|i| i.p90_ms)),
                    ("p99", num(|i| i.p99_ms)),
                    ("max", num(|i| i.max_ms)),
                ],
                w,
            ),
        ],
    );
    // A resumed turn keeps its figures but not its gaps: never "no gaps yet" beside them.
    let bars = if gaps.is_empty() && count > 0 {
        Content::Text(vec![cut("ITL bars: not saved (resumed)", w, theme::DIM)])
    } else {
        Content::Spark(
            gaps.iter()
                .map(|g| u64::try_from(g.as_micros()).map_or(MAX_GAP_US, |us| us.min(MAX_GAP_US)))
                .collect(),
        )
    };
    [
        figures,
        Piece {
            priority: 4,
            content: bars,
        },
    ]
}

/// Speculation: the gaps between target passes and tokens per pass (when a pass delivers
/// several tokens), then the speculation figures.
fn speculation_pieces(focus: Option<&Focus>, w: usize) -> Vec<Piece> {
    // A verify pass's accepted tokens share one time, so the per-pass figures go beside the
    // per-token ones.
    let passes = focus
        .and_then(|f| f.figures.pass_gap.zip(f.figures.tokens_per_pass))
        .filter(|(_, per_pass)| *per_pass > 1.0)
        .map(|(gap, per_pass)| {
            let head = row("pass gap ms", format!("{} passes", gap.count), w, HEAD);
            let figures = [
                ("p50", format::num(Some(gap.p50_ms))),
                ("max", format::num(Some(gap.max_ms))),
                ("tok/pass", format::num(Some(per_pass))),
            ];
            Piece::text(2, vec![head, cells(&figures, w)])
        });
    let spec = focus.and_then(|f| f.turn.spec.as_ref());
    passes
        .into_iter()
        .chain(spec.map(|stats| Piece::text(3, spec_lines(stats, w))))
        .collect()
}

/// Host time per token and where sampling ran, for a local turn that measured it.
fn host_piece(focus: Option<&Focus>, w: usize) -> Option<Piece> {
    let h = focus
        .and_then(|f| f.turn.host.as_ref())
        .filter(|h| h.host_us_per_token.is_some() && h.sampler != "server")?;
    let place = if h.place.backend { "graph" } else { "host" };
    let label = format!("host µs/tok ({place} sampling)");
    Some(Piece::text(
        3,
        vec![row(&label, format::num(h.host_us_per_token), w, HEAD)],
    ))
}

/// The roofline of the answer shown: bytes a decode step reads at the current context depth,
/// the bandwidth ceiling that gives, how close decode gets to it (MBU), and the cost per 1M
/// tokens at the configured GPU-hour price. All from `metrics::roofline`.
fn roofline_lines(app: &App, view: &View, w: usize) -> Vec<Line<'static>> {
    use crate::metrics::roofline::{BandwidthSource, ABOVE_CEILING};
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
        let text: String = lines[2].spans.iter().map(|s| s.content.as_ref()).collect();
        lines[2] = cut(&format!("{}…", text.trim_end()), w, theme::DIM);
    }
    // A partial offload: where the KV cache is (each layer's cache sits on that layer's
    // device; the output layer has none), each side's figure and where it comes from, then
    // their blend.
    if let Some((n, of, gpu_gb_s, gpu, cpu_gb_s, cpu)) = split {
        // llama.cpp offloads the output layer first (it has no cache), then the repeating
        // layers from the last (`LayerSplit`).
        let layers = crate::metrics::roofline::LayerSplit::of(of.saturating_sub(1), n);
        let kv = format!("{}/{} layers", layers.repeating_on_gpu, layers.n_layer);
        lines.push(row("  KV on GPU", kv, w, SUB));
        for (label, gb_s, from) in [("  GPU GB/s", gpu_gb_s, gpu), ("  CPU GB/s", cpu_gb_s, cpu)] {
            lines.push(row(label, format::num(Some(gb_s)), w, SUB));
            lines.push(cut(&format!("    {}", from.label()), w, theme::DIM));
        }
    }
    let blend = if split.is_some() {
        "  blend GB/s"
    } else {
        "  bandwidth GB/s"
    };
    lines.extend(sub_rows(
        [
            (blend, format::num(bandwidth.map(|b| b.bytes_per_s / 1e9))),
            (
                "  bytes/token MB",
                format::num(roofline.bytes_per_token.map(|b| b / 1e6)),
            ),
            ("  ceiling tok/s", format::num(roofline.ceiling_tok_per_s)),
        ],
        w,
    ));
    match roofline.mbu {
        Some(u) => {
            let above = crate::metrics::roofline::above_ceiling(u);
            let pct = format!(" MBU {:>3.0}%{}", u * 100.0, if above { "↑" } else { "" });
            lines.push(gauge("  ", u, pct, theme::GAUGE_FILLED, w));
            if above {
                lines.push(cut(&format!("  ↑ {ABOVE_CEILING}"), w, theme::DIM));
            }
        }
        None => lines.push(row("  MBU %", "—".to_string(), w, SUB)),
    }
    if let Some(other) = &roofline.other_model {
        lines.push(cut(&format!("  ran on {other}: no MBU"), w, theme::DIM));
    }
    // What the configured hour is the price of: the GPU's when layers run on one, the
    // server's for a remote chat, else this machine's.
    let hour = match app.model.as_ref() {
        Some(m) if m.backend == "remote" => "server-h",
        Some(m) if m.n_gpu_layers > 0 && m.backend != "CPU" => "GPU-h",
        _ => "machine-h",
    };
    let price = format!("  $/1M @{:.2}/{hour}", app.price_per_hour_usd);
    lines.push(row(
        &price,
        format::num(roofline.cost_per_million_tokens),
        w,
        SUB,
    ));
    lines
}

/// A remote turn's TTFT breakdown (network round trip, the server's prompt time and cache
/// hits, the rest) and the source of its token counts; "—" for what the server does not say.
fn remote_breakdown(r: &super::view::RemoteFigures, w: usize) -> Vec<Line<'static>> {
    let mut lines = vec![row(
        "  network RTT ms",
        format::num(r.network_rtt_ms),
        w,
        SUB,
    )];
    if r.server_queue_ms.is_some() || r.server_first_token_ms.is_some() {
        // vLLM's own split: its queue, then its time to first token; the rest is the
        // transport and the server's tokenizer.
        lines.extend(sub_rows(
            [
                ("  server queue ms", format::num(r.server_queue_ms)),
                ("  server TTFT ms", format::num(r.server_first_token_ms)),
                ("  net+other ms", format::num(r.rest_ms)),
            ],
            w,
        ));
    } else {
        if r.server_load_ms.is_some() {
            lines.push(row(
                "  server load ms",
                format::num(r.server_load_ms),
                w,
                SUB,
            ));
        }
        lines.extend(sub_rows(
            [
                ("  server prompt ms", format::num(r.server_prompt_ms)),
                ("  1st step+net ms", format::num(r.rest_ms)),
            ],
            w,
        ));
    }
    lines.extend(sub_rows(
        [
            ("  prompt tok", opt_count(r.prompt_tokens)),
            ("  cached tok", opt_count(r.cached_tokens)),
        ],
        w,
    ));
    let source = format!("tokens: {}", r.token_source);
    lines.extend(wrapped(source, theme::METRIC_SUB_LABEL, w));
    if let Some(cold) = r.cold {
        let cold = format!("⚠ cold: {}", cold.words());
        lines.extend(wrapped(cold, theme::NOTICE_WARNING, w));
    }
    if let Some(source) = r.timing_source {
        let source = format!("server times: {source}");
        lines.extend(wrapped(source, theme::METRIC_SUB_LABEL, w));
    }
    lines
}

/// Speculative decoding's figures (`metrics::spec`): acceptance, tokens per target pass,
/// draft and verify time per step, and the roofline's expected speed-up beside the measured
/// one (against this turn's own plain passes; `—` without any).
fn spec_lines(stats: &crate::metrics::spec::SpecStats, w: usize) -> Vec<Line<'static>> {
    let sp = stats.summary();
    let head = format!("spec {} k≤{}", sp.mode, sp.draft_max);
    let accepted = format!("{}/{} accepted", sp.accepted, sp.drafted);
    let mut lines = vec![row(&head, accepted, w, HEAD)];
    if let Some(why) = &sp.off_reason {
        lines.push(cut(&format!("off: {why}"), w, theme::DIM));
        return lines;
    }
    let num = format::num;
    let acc = num(sp.acceptance_rate.map(|x| x * 100.0));
    lines.extend([
        cells(&[("acc%", acc), ("tok/pass", num(sp.tokens_per_pass))], w),
        cells(
            &[
                ("draft ms", num(sp.draft_ms_per_step)),
                ("verify ms", num(sp.verify_ms_per_pass)),
            ],
            w,
        ),
        row("  target passes/tok", num(sp.passes_per_token), w, SUB),
        cells(
            &[
                ("exp ×", num(sp.expected_speedup)),
                ("meas ×", num(sp.measured_speedup)),
            ],
            w,
        ),
        row(
            "  exp × with compute",
            num(sp.expected_speedup_compute),
            w,
            SUB,
        ),
    ]);
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
    let mut lines = vec![row("quality", name, w, HEAD)];
    let dim = |text: &str| cut(text, w, theme::DIM);
    match quality {
        None => lines.push(dim("  scored after each answer")),
        Some(TurnQuality::Scoring(_)) => lines.push(dim("  scoring…")),
        Some(TurnQuality::NotScored(why)) => {
            let why = why.lines().next().unwrap_or_default();
            lines.push(dim(&format!("  not scored: {why}")));
        }
        Some(TurnQuality::Scored(score)) => match &score.summary {
            None => lines.push(dim("  no answer tokens")),
            Some(a) => {
                let divergence = a
                    .first_divergence
                    .map_or_else(|| "none".to_string(), |i| format!("token {}", i + 1));
                let digits = crate::metrics::quality::kld_digits(score);
                let (mean, p99) = digits.map_or_else(Default::default, |d| (d.mean, d.p99));
                lines.extend([
                    cells(&[("KLD", mean), ("p99", p99)], w),
                    cells(
                        &[
                            (
                                "same top",
                                crate::metrics::quality::same_top_cell(a.same_top_pct),
                            ),
                            ("<1% ref", a.below_low_p.to_string()),
                        ],
                        w,
                    ),
                    row("  1st diverges", divergence, w, SUB),
                ]);
                if !app.quality_colours {
                    lines.push(dim("  Alt+K: tokens by KLD"));
                }
            }
        },
    }
    if let Some(c) = app.conversation_quality().filter(|c| c.answers > 1) {
        let pooled = format!(
            "KLD {} · {}",
            crate::metrics::quality::kld_mean_cell(c.kld_mean),
            crate::metrics::quality::same_top_cell(c.same_top_pct)
        );
        lines.push(row(&format!("  {} answers", c.answers), pooled, w, SUB));
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
    let head = row("own confidence", String::new(), w, HEAD);
    let rest = match confidence {
        None => vec![cut("  measured from the next answer", w, theme::DIM)],
        Some(TurnConfidence::Unavailable) => {
            vec![cut(
                "  not available: sampled on the backend",
                w,
                theme::DIM,
            )]
        }
        Some(TurnConfidence::Measured(tokens)) => match AnswerConfidence::of(tokens) {
            None => vec![cut("  no answer tokens", w, theme::DIM)],
            Some(a) => vec![
                cells(
                    &[
                        ("mean p", format!("{:.3}", a.p_mean)),
                        ("min p", format!("{:.3}", a.p_min)),
                    ],
                    w,
                ),
                cells(
                    &[
                        ("entropy", format!("{:.2}", a.entropy_mean)),
                        (&format!("p<{CONFIDENCE_LOW_P}"), a.below_low_p.to_string()),
                    ],
                    w,
                ),
            ],
        },
    };
    Some(std::iter::once(head).chain(rest).collect())
}

/// A count, or `—` when unknown.
fn opt_count<T: ToString>(n: Option<T>) -> String {
    n.map_or_else(|| "—".to_string(), |n| n.to_string())
}

fn context_lines(view: &View, w: usize) -> Vec<Line<'static>> {
    let (used, total) = (view.context_used, view.n_ctx);
    let value = total.map_or_else(|| "—".to_string(), |t| format!("{used} / {t}"));
    let mut lines = vec![row("context tok", value, w, MAIN)];
    if let Some(total) = total.filter(|t| *t > 0) {
        let fraction = (used as f64 / f64::from(total)).clamp(0.0, 1.0);
        let pct = format!(" {:>3.0}%", fraction * 100.0);
        let fill = if fraction >= 0.9 {
            theme::GAUGE_FULL
        } else {
            theme::GAUGE_FILLED
        };
        lines.push(gauge("", fraction, pct, fill, w));
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
    let header = cut(
        &fmt_row("#", "TTFT ms", "tok/s", "tok"),
        w,
        theme::METRIC_SECTION,
    );
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
            let few = s.itl.is_none_or(|itl| itl.count < FEW_GAPS) && s.decode_tok_per_s.is_some();
            let rate = crate::fmt::opt(s.decode_tok_per_s, 1);
            let text = fmt_row(
                &format!("{mark}{}", i + 1),
                &format::num(s.ttft_ms),
                &format!("{}{rate}", if few { "~" } else { "" }),
                &s.tokens_generated.to_string(),
            );
            Some(cut(&text, w, theme::METRIC_LABEL))
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
    let num = |f: fn(&Figures) -> Option<f64>| format::num(s.and_then(f));
    let waiting = view
        .waiting
        .map(|waited| format!("waiting {} ms", format::num(Some(ms(waited)))));
    let parts: Vec<String> = waiting
        .into_iter()
        .chain([
            format!("TTFT {} ms", num(|s| s.ttft_ms)),
            format!("{} tok/s", num(|s| s.decode_tok_per_s)),
            format!("ITL p50 {} ms", num(|s| s.itl.map(|i| i.p50_ms))),
            format!("ctx {}/{}", view.context_used, opt_count(view.n_ctx)),
        ])
        .collect();
    Line::from(Span::styled(parts.join(" · "), theme::METRICS_STRIP))
}
