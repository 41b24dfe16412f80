//! The bench screen: batching, the first lever. B sequences decoded together share each read
//! of the weights; whether aggregate tok/s then rises faster than each sequence's latency is
//! what the sweep measures, and the headline says it from the rows. A table
//! of every measured batch size and two charts against B: aggregate and per-sequence tok/s, and
//! per-sequence ITL p50/p99. Reads `app.bench`; the figures come from the engine's
//! measurements and `metrics::roofline` for the cost.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, LegendPosition, Paragraph};
use ratatui::Frame;

use super::{format, theme};
use crate::app::{App, BenchPoint};
use crate::metrics::roofline::cost_per_million_tokens;

pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let b = &app.bench;
    let inner = super::screen_block(
        frame,
        area,
        format!(
            " batching: B sequences × {} prompt + {} generated tokens ",
            b.n_prompt, b.n_gen
        ),
    );
    // The headline comes from the rows, never before them: on a compute-bound CPU batching
    // may not pay at all.
    let points: Vec<crate::metrics::BatchPoint> = b.points.iter().map(|p| p.point).collect();
    let headline = match crate::metrics::batching_verdict(&points) {
        Some(v) if b.running.is_none() => Span::styled(v, theme::METRIC_VALUE),
        _ => Span::styled(
            "B sequences share each read of the weights; whether that pays on this machine is measured below",
            theme::DIM,
        ),
    };
    let mut headline = super::text::wrap(&[headline], inner.width as usize, &[], &[]);
    headline.truncate(2);
    let table_h = (b.batches.len() as u16 + 2).min(inner.height / 2);
    let [intro, table, charts, footer] = Layout::vertical([
        Constraint::Length(headline.len() as u16),
        Constraint::Length(table_h),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(inner);
    frame.render_widget(Paragraph::new(headline), intro);
    frame.render_widget(Paragraph::new(table_lines(app)), table);
    if charts.height >= 6 && !b.points.is_empty() {
        let [left, right] =
            // A gap, so the left chart's axis title never runs into the right one's labels.
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                .spacing(2)
                .areas(charts);
        draw_rate_chart(frame, left, &b.points);
        draw_latency_chart(frame, right, &b.points);
    }
    let status = match (&b.running, &b.error, b.points.is_empty()) {
        (Some(_), _, _) => {
            let next = b.batches.get(b.points.len()).copied().unwrap_or(0);
            format!("measuring B = {next}…  Esc stops")
        }
        (None, Some(e), _) => format!("error: {e}"),
        (None, None, true) => "Enter or r runs the sweep on the loaded model · Esc closes".into(),
        (None, None, false) if b.stopped => {
            "stopped · Enter or r runs it again · Esc closes".into()
        }
        (None, None, false) => "Enter or r runs it again · Esc closes".into(),
    };
    let status = match (&b.running, &b.saved) {
        (None, Some(Ok(id))) => format!("{status} · saved as run {id} (tokscope results {id})"),
        (None, Some(Err(e))) => format!("{status} · not saved: {e}"),
        _ => status,
    };
    let style = if b.error.is_some() {
        theme::NOTICE_ERROR
    } else {
        theme::NOTICE_INFO
    };
    frame.render_widget(Paragraph::new(Span::styled(status, style)), footer);
}

fn table_lines(app: &App) -> Vec<Line<'static>> {
    let points = &app.bench.points;
    let base = points.iter().find(|p| p.point.batch == 1);
    let mut lines = vec![Line::from(Span::styled(
        format!(
            "{:>4} {:>10} {:>10} {:>8} {:>9} {:>9} {:>9} {:>10} {:>10}",
            "B",
            "agg tok/s",
            "seq tok/s",
            "speed-up",
            "ITL p50",
            "ITL p99",
            "latency×",
            "prefill ms",
            "$/1M tok"
        ),
        theme::METRIC_SECTION,
    ))];
    for p in points {
        let ratio =
            |a: Option<f64>, b: Option<f64>| a.zip(b.filter(|b| *b > 0.0)).map(|(a, b)| a / b);
        let speedup = ratio(
            p.point.aggregate_tok_per_s,
            base.and_then(|b| b.point.aggregate_tok_per_s),
        );
        let latency = ratio(p.point.itl_p50_ms, base.and_then(|b| b.point.itl_p50_ms));
        lines.push(Line::from(Span::styled(
            format!(
                "{:>4} {:>10} {:>10} {:>8} {:>9} {:>9} {:>9} {:>10} {:>10}",
                p.point.batch,
                format::num(p.point.aggregate_tok_per_s),
                format::num(p.point.per_sequence_tok_per_s),
                speedup.map_or("—".into(), |s| format!("{s:.2}×")),
                format::num(p.point.itl_p50_ms),
                format::num(p.point.itl_p99_ms),
                latency.map_or("—".into(), |s| format!("{s:.2}×")),
                format::num(p.prefill_ms),
                format::num(
                    p.point
                        .aggregate_tok_per_s
                        .and_then(|r| cost_per_million_tokens(app.price_per_hour_usd, r))
                ),
            ),
            theme::METRIC_VALUE,
        )));
    }
    lines
}

/// x = log2(B), so 1, 2, 4 … 64 are evenly spaced.
fn x_of(p: &BenchPoint) -> f64 {
    f64::from(p.point.batch.max(1)).log2()
}

fn x_axis(points: &[BenchPoint]) -> Axis<'static> {
    let max = points.iter().map(x_of).fold(0.0, f64::max).max(1.0);
    let labels: Vec<Span<'static>> = points
        .iter()
        .map(|p| Span::styled(p.point.batch.to_string(), theme::AXIS))
        .collect();
    Axis::default()
        .title(Span::styled("B (sequences)", theme::AXIS))
        .bounds([0.0, max])
        .labels(labels)
}

fn y_axis(title: &'static str, max: f64) -> Axis<'static> {
    let max = if max.is_finite() && max > 0.0 {
        max * 1.1
    } else {
        1.0
    };
    Axis::default()
        .title(Span::styled(title, theme::AXIS))
        .bounds([0.0, max])
        .labels(vec![
            Span::styled("0", theme::AXIS),
            Span::styled(format::num(Some(max / 2.0)), theme::AXIS),
            Span::styled(format::num(Some(max)), theme::AXIS),
        ])
}

fn draw_rate_chart(frame: &mut Frame, area: Rect, points: &[BenchPoint]) {
    let aggregate: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((x_of(p), p.point.aggregate_tok_per_s?)))
        .collect();
    let per_seq: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((x_of(p), p.point.per_sequence_tok_per_s?)))
        .collect();
    let max = aggregate.iter().map(|(_, y)| *y).fold(0.0, f64::max);
    let chart = Chart::new(vec![
        Dataset::default()
            .name("aggregate")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme::SERIES_AGGREGATE)
            .data(&aggregate),
        Dataset::default()
            .name("per sequence")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme::SERIES_PER_SEQUENCE)
            .data(&per_seq),
    ])
    .x_axis(x_axis(points))
    .y_axis(y_axis("tok/s", max))
    // Short names (the axis says tok/s), so the legend stays at 80×24.
    .hidden_legend_constraints((Constraint::Ratio(2, 3), Constraint::Ratio(2, 3)))
    // Aggregate rises to the right and per-sequence stays low: the top left hides nothing.
    .legend_position(Some(LegendPosition::TopLeft));
    frame.render_widget(chart, area);
}

fn draw_latency_chart(frame: &mut Frame, area: Rect, points: &[BenchPoint]) {
    let p50: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((x_of(p), p.point.itl_p50_ms?)))
        .collect();
    let p99: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((x_of(p), p.point.itl_p99_ms?)))
        .collect();
    let max = p99.iter().map(|(_, y)| *y).fold(0.0, f64::max);
    let chart = Chart::new(vec![
        Dataset::default()
            .name("ITL p50 ms")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme::SERIES_P50)
            .data(&p50),
        Dataset::default()
            .name("ITL p99 ms")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme::SERIES_P99)
            .data(&p99),
    ])
    .x_axis(x_axis(points))
    .y_axis(y_axis("ms per token", max))
    .hidden_legend_constraints((Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)));
    frame.render_widget(chart, area);
}
