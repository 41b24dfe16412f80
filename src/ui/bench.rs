//! The bench screen: batching, the first lever. B sequences decoded together share each read
//! of the weights; whether aggregate tok/s then rises faster than each sequence's latency is
//! what the sweep measures, and the headline says it from the rows. A table
//! of every measured batch size and two charts against B: aggregate and per-sequence tok/s, and
//! per-sequence ITL p50/p99. Reads `app.bench`; the figures come from the engine's
//! measurements and `metrics::roofline` for the cost.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, LegendPosition, Paragraph};
use ratatui::Frame;

use super::{format, theme};
use crate::app::{App, BenchPoint, BenchScreen, SweepView};
use crate::metrics::roofline::cost_per_million_tokens;

pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let b = &app.bench;
    let inner = super::screen_block(
        frame,
        area,
        format!(
            " batching: B sequences × {} prompt + {} generated tokens · Tab: depth ",
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
    let [table, charts, footer] = sweep_areas(frame, inner, headline, b.batches.len() + 2);
    frame.render_widget(Paragraph::new(table_lines(app)), table);
    if charts.height >= 6 && !b.points.is_empty() {
        let [left, right] =
            // A gap, so the left chart's axis title never runs into the right one's labels.
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                .spacing(2)
                .areas(charts);
        // Short names (the axis says tok/s), so the legend stays at 80×24. Aggregate rises to
        // the right and per-sequence stays low: the top left hides nothing.
        let (agg, seq) = (theme::SERIES_AGGREGATE, theme::SERIES_PER_SEQUENCE);
        let rates: [Series; 2] = [
            ("aggregate", agg, |p| p.aggregate_tok_per_s),
            ("per sequence", seq, |p| p.per_sequence_tok_per_s),
        ];
        let legend = (Constraint::Ratio(2, 3), LegendPosition::TopLeft);
        draw_chart(frame, left, &b.points, rates, (0, "tok/s"), legend);
        let latencies: [Series; 2] = [
            ("ITL p50 ms", theme::SERIES_P50, |p| p.itl_p50_ms),
            ("ITL p99 ms", theme::SERIES_P99, |p| p.itl_p99_ms),
        ];
        let legend = (Constraint::Ratio(1, 2), LegendPosition::default());
        let y = (1, "ms per token");
        draw_chart(frame, right, &b.points, latencies, y, legend);
    }
    let ours = b.ran == SweepView::Batch;
    let status = match (&b.running, b.error.as_ref().filter(|_| ours)) {
        (Some(_), _) if ours => {
            let next = b.batches.get(b.points.len()).copied().unwrap_or(0);
            format!("measuring B = {next}…  Esc stops")
        }
        (Some(_), _) => "the depth sweep is running (Tab shows it)…  Esc stops".into(),
        (None, Some(e)) => format!("error: {e}"),
        (None, None) if b.points.is_empty() => {
            "Enter or r runs the sweep on the loaded model · Esc closes".into()
        }
        (None, None) if b.stopped && ours => {
            "stopped · Enter or r runs it again · Esc closes".into()
        }
        (None, None) => "Enter or r runs it again · Esc closes".into(),
    };
    frame.render_widget(footer_line(b, status, ours), footer);
}

/// The areas both sweeps' screens share below the headline (drawn here, at most two lines):
/// the table of `rows` lines (at most half the screen), the charts and the footer line.
pub(super) fn sweep_areas(
    frame: &mut Frame,
    inner: Rect,
    headline: Span<'static>,
    rows: usize,
) -> [Rect; 3] {
    let mut headline = super::text::wrap(&[headline], inner.width as usize, &[], &[]);
    headline.truncate(2);
    let table_h = u16::try_from(rows)
        .unwrap_or(u16::MAX)
        .min(inner.height / 2);
    let [intro, table, charts, footer] = Layout::vertical([
        Constraint::Length(headline.len() as u16),
        Constraint::Length(table_h),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(inner);
    frame.render_widget(Paragraph::new(headline), intro);
    [table, charts, footer]
}

/// The footer line: `status`, then where the sweep went in the results log once it ended;
/// `ours`: the sweep last run was this view's (its error and save are shown only then).
pub(super) fn footer_line(b: &BenchScreen, status: String, ours: bool) -> Paragraph<'static> {
    let status = match (&b.running, b.saved.as_ref().filter(|_| ours)) {
        (None, Some(Ok(id))) => format!("{status} · saved as run {id} (tokscope results {id})"),
        (None, Some(Err(e))) => format!("{status} · not saved: {e}"),
        _ => status,
    };
    let style = if b.error.is_some() && ours {
        theme::NOTICE_ERROR
    } else {
        theme::NOTICE_INFO
    };
    Paragraph::new(Span::styled(status, style))
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

/// A chart's y axis from 0 to a little above `max`, titled `title`, labelled at 0, the middle
/// and the top.
pub(super) fn y_axis(title: &'static str, max: f64) -> Axis<'static> {
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

/// A series: its legend name, style and value of each point.
type Series = (
    &'static str,
    Style,
    fn(&crate::metrics::BatchPoint) -> Option<f64>,
);

/// Two series against B, the y axis (`title`) scaled to the largest value of `series[scale]`,
/// the legend where it goes and hidden below `legend.0` of the chart's size.
fn draw_chart(
    frame: &mut Frame,
    area: Rect,
    points: &[BenchPoint],
    series: [Series; 2],
    (scale, title): (usize, &'static str),
    legend: (Constraint, LegendPosition),
) {
    let data = series.map(|(_, _, value)| {
        let data = points
            .iter()
            .filter_map(|p| Some((x_of(p), value(&p.point)?)));
        data.collect::<Vec<(f64, f64)>>()
    });
    let max = data[scale].iter().map(|(_, y)| *y).fold(0.0, f64::max);
    let datasets = series.iter().zip(&data).map(|((name, style, _), data)| {
        Dataset::default()
            .name(*name)
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(*style)
            .data(data)
    });
    let chart = Chart::new(datasets.collect())
        .x_axis(x_axis(points))
        .y_axis(y_axis(title, max))
        .hidden_legend_constraints((legend.0, legend.0))
        .legend_position(Some(legend.1));
    frame.render_widget(chart, area);
}
