//! The bench screen's depth view (F2, then Tab or d): decode against the depth of the KV
//! cache. Every decode step reads the weights and the cache so far, so decode slows as the
//! conversation grows; by how much the bytes say it should is beside what it does. One sweep
//! runs bench's tg test after filling a cache of its own to each depth (`bench -d`); this
//! chat's own answers are drawn at their depths on the same axes. The figures come from the
//! engine's measurements and `metrics::roofline` (bytes, ceiling, MBU, the slowdown).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, LegendPosition, Paragraph};
use ratatui::Frame;

use super::bench::{footer_line, sweep_areas, y_axis};
use super::view::{ran_on_loaded, Figures};
use super::{format, theme};
use crate::app::{App, SweepView};
use crate::metrics::roofline::{depth_point, depth_slowdown, depth_verdict, mbu, DepthPoint};

/// The sweep's points and this chat's answers as depth points (empty without a local model
/// whose weights' bytes are known).
struct Points {
    sweep: Vec<DepthPoint>,
    chat: Vec<DepthPoint>,
}

fn points(app: &App) -> Points {
    let none = Points {
        sweep: Vec::new(),
        chat: Vec::new(),
    };
    let Some(model) = app.model.as_ref() else {
        return none;
    };
    let Some(weights) = model.weight_bytes.as_ref() else {
        return none;
    };
    let bandwidth = app
        .bandwidth
        .placed(Some(weights), model.n_layer, model.n_gpu_layers)
        .map(|b| b.bytes_per_s);
    let kv = model.kv_shape.as_ref();
    let at = |depth: u64, n_gen: u64, tok_per_s| {
        depth_point((depth, n_gen), tok_per_s, weights, kv, bandwidth)
    };
    let sweep = app
        .bench
        .depth_points
        .iter()
        .map(|r| at(u64::from(r.depth), u64::from(r.n_gen), r.tok_per_s))
        .collect();
    // This chat's finished answers on the loaded model, at the depth their decode began;
    // speculative answers (several tokens a pass) are another measurement and left out.
    let chat = app
        .conversation
        .exchanges
        .iter()
        .filter_map(|e| e.assistant.as_ref())
        .filter(|t| t.is_finished() && ran_on_loaded(t, Some(model)))
        .filter_map(|t| {
            let figures = Figures::of(t, false);
            if figures.tokens_per_pass.is_some_and(|k| k > 1.0) {
                return None;
            }
            let prompt = t.timeline.prompt_tokens? as u64;
            let generated = t.timeline.tokens_generated() as u64;
            Some(at(prompt, generated, figures.decode_tok_per_s?))
        })
        .collect();
    Points { sweep, chat }
}

pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let b = &app.bench;
    let inner = super::screen_block(
        frame,
        area,
        format!(
            " decode against depth: tg{} after d tokens in the cache (bench -d) · Tab: batching ",
            b.depth_n_gen
        ),
    );
    let p = points(app);
    let headline = match depth_verdict(&p.sweep) {
        Some(v) if b.running.is_none() => Span::styled(v, theme::METRIC_VALUE),
        _ => Span::styled(
            "every decode step reads the weights and the KV cache so far: decode slows as the cache grows; measured below against what the bytes predict",
            theme::DIM,
        ),
    };
    let [table, charts, footer_area] = sweep_areas(frame, inner, headline, p.sweep.len() + 1);
    frame.render_widget(
        Paragraph::new(table_lines(app, &p.sweep, table.width as usize)),
        table,
    );
    if charts.height >= 6 && !(p.sweep.is_empty() && p.chat.is_empty()) {
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                .spacing(2)
                .areas(charts);
        draw_speed_chart(frame, left, &p);
        draw_bytes_chart(frame, right, &p);
    }
    frame.render_widget(footer(app, b.ran == SweepView::Depth), footer_area);
}

fn footer(app: &App, ours: bool) -> Paragraph<'static> {
    let b = &app.bench;
    let n_ctx = app.model.as_ref().map_or(0, |m| m.n_ctx);
    let depths = b.depths_for(n_ctx);
    let list = depths
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let status = match (&b.running, b.error.as_ref().filter(|_| ours)) {
        (Some(_), _) if ours => {
            let next = depths.get(b.depth_points.len()).copied().unwrap_or(0);
            format!("measuring depth {next} (filling the cache first, untimed)…  Esc stops")
        }
        (Some(_), _) => "the batching sweep is running (Tab shows it)…  Esc stops".into(),
        (None, Some(e)) => format!("error: {e}"),
        (None, None) if b.depth_points.is_empty() => format!(
            "Enter or r measures tg{} at depths {list} (those that fit the chat's -c {n_ctx}) · Esc closes",
            b.depth_n_gen
        ),
        (None, None) if b.stopped && ours => "stopped · Enter or r runs it again · Esc closes".into(),
        (None, None) => "Enter or r runs it again · Esc closes".into(),
    };
    footer_line(b, status, ours)
}

/// The table's columns: header and width, in order; at a narrow width the last of
/// `DROPPED_FIRST` go first, so depth, tok/s, the bytes and the two ratios always show.
const COLUMNS: [(&str, usize); 10] = [
    ("depth", 7),
    ("tok/s", 8),
    ("ITL p50", 8),
    ("KV/token", 9),
    ("bytes/tok", 10),
    ("ceiling", 9),
    ("MBU", 6),
    ("vs d0", 7),
    ("bytes→", 7),
    ("fill s", 7),
];
const DROPPED_FIRST: [usize; 4] = [9, 2, 5, 3];

fn table_lines(app: &App, sweep: &[DepthPoint], width: usize) -> Vec<Line<'static>> {
    let mut shown = [true; 10];
    let used = |shown: &[bool; 10]| -> usize {
        (COLUMNS.iter().zip(shown))
            .filter(|(_, s)| **s)
            .map(|((_, w), _)| w + 1)
            .sum()
    };
    for i in DROPPED_FIRST {
        if used(&shown) <= width {
            break;
        }
        shown[i] = false;
    }
    let row = |cells: [String; 10]| {
        let kept = cells.iter().zip(COLUMNS).zip(shown).filter(|(_, s)| *s);
        kept.map(|((c, (_, w)), _)| format!("{c:>w$}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut lines = vec![Line::from(Span::styled(
        row(COLUMNS.map(|(h, _)| h.to_string())),
        theme::METRIC_SECTION,
    ))];
    let times = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.2}×"));
    for (p, measured, predicted) in depth_slowdown(sweep) {
        let run = app
            .bench
            .depth_points
            .iter()
            .find(|r| u64::from(r.depth) == p.depth);
        let mbu_pct = p
            .ceiling_tok_per_s
            .and_then(|c| mbu(p.tok_per_s, c))
            .map(|m| m * 100.0);
        lines.push(Line::from(Span::styled(
            row([
                p.depth.to_string(),
                format::num(Some(p.tok_per_s)),
                format::num(run.and_then(|r| r.itl_p50_ms)),
                crate::fmt::bytes_f64(p.kv_bytes_per_token),
                crate::fmt::bytes_f64(p.bytes_per_token),
                format::num(p.ceiling_tok_per_s),
                mbu_pct.map_or("—".into(), |m| {
                    crate::metrics::roofline::mbu_pct_cell(m, 1)
                }),
                times(measured),
                times(predicted),
                crate::fmt::opt(run.map(|r| r.fill_ms / 1e3), 1),
            ]),
            theme::METRIC_VALUE,
        )));
    }
    lines
}

/// The depth axis, linear (the bytes grow linearly with it), labelled at 0, the middle and
/// the end, in tokens.
fn x_axis(max: f64) -> Axis<'static> {
    let label = |v: f64| Span::styled(tokens(v), theme::AXIS);
    Axis::default()
        .title(Span::styled("depth (tokens in the cache)", theme::AXIS))
        .bounds([0.0, max])
        .labels(vec![label(0.0), label(max / 2.0), label(max)])
}

fn tokens(v: f64) -> String {
    if v >= 1024.0 {
        format!("{}k", crate::fmt::sig(v / 1024.0, 2))
    } else {
        format!("{v:.0}")
    }
}

fn x_max(p: &Points) -> f64 {
    let max = p
        .sweep
        .iter()
        .chain(&p.chat)
        .map(|q| q.depth as f64)
        .fold(0.0, f64::max);
    max.max(1.0)
}

fn dataset<'a>(
    name: &'static str,
    style: Style,
    kind: GraphType,
    data: &'a [(f64, f64)],
) -> Dataset<'a> {
    Dataset::default()
        .name(name)
        .marker(Marker::Braille)
        .graph_type(kind)
        .style(style)
        .data(data)
}

/// tok/s against depth: the sweep as measured, the speed depth 0's would fall to if only the
/// bytes grew, and this chat's answers.
fn draw_speed_chart(frame: &mut Frame, area: Rect, p: &Points) {
    let slowdown = depth_slowdown(&p.sweep);
    let base = slowdown
        .first()
        .filter(|(q, ..)| q.depth == 0)
        .map(|(q, ..)| q.tok_per_s);
    let measured: Vec<(f64, f64)> = slowdown
        .iter()
        .map(|(q, ..)| (q.depth as f64, q.tok_per_s))
        .collect();
    let predicted: Vec<(f64, f64)> = slowdown
        .iter()
        .filter_map(|(q, _, r)| Some((q.depth as f64, base? * (*r)?)))
        .collect();
    let chat: Vec<(f64, f64)> = p
        .chat
        .iter()
        .map(|q| (q.depth as f64, q.tok_per_s))
        .collect();
    let max = measured
        .iter()
        .chain(&predicted)
        .chain(&chat)
        .map(|(_, y)| *y)
        .fold(0.0, f64::max);
    let datasets = vec![
        dataset(
            "measured",
            theme::SERIES_AGGREGATE,
            GraphType::Line,
            &measured,
        ),
        dataset(
            "bytes predict",
            theme::SERIES_PER_SEQUENCE,
            GraphType::Line,
            &predicted,
        ),
        dataset("this chat", theme::SERIES_P99, GraphType::Scatter, &chat),
    ];
    let chart = Chart::new(datasets)
        .x_axis(x_axis(x_max(p)))
        .y_axis(y_axis("tok/s", max))
        .hidden_legend_constraints((Constraint::Ratio(2, 3), Constraint::Ratio(2, 3)))
        .legend_position(Some(LegendPosition::Right));
    frame.render_widget(chart, area);
}

/// Bytes a decode step reads against depth: all of them (weights + KV cache) and the cache's
/// part, in MB.
fn draw_bytes_chart(frame: &mut Frame, area: Rect, p: &Points) {
    let all: Vec<&DepthPoint> = {
        let mut v: Vec<&DepthPoint> = p.sweep.iter().chain(&p.chat).collect();
        v.sort_by_key(|q| q.depth);
        v
    };
    let total: Vec<(f64, f64)> = all
        .iter()
        .map(|q| (q.depth as f64, q.bytes_per_token / 1e6))
        .collect();
    let kv: Vec<(f64, f64)> = all
        .iter()
        .map(|q| (q.depth as f64, q.kv_bytes_per_token / 1e6))
        .collect();
    let max = total.iter().map(|(_, y)| *y).fold(0.0, f64::max);
    let datasets = vec![
        dataset(
            "weights + KV",
            theme::SERIES_AGGREGATE,
            GraphType::Line,
            &total,
        ),
        dataset("KV cache", theme::SERIES_P50, GraphType::Line, &kv),
    ];
    let chart = Chart::new(datasets)
        .x_axis(x_axis(x_max(p)))
        .y_axis(y_axis("MB read per token", max))
        .hidden_legend_constraints((Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)))
        .legend_position(Some(LegendPosition::Left));
    frame.render_widget(chart, area);
}
