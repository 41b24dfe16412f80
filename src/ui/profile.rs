//! The profile screen (F4): where the decode steps' time goes. The last profiled step's parts
//! as bars (time, share, GB/s and MBU beside each), the mean over the turn's profiled steps,
//! one column per layer so an outlier layer stands out, and the operations. Reads
//! `app.profile`; the figures are `metrics::profile`'s.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::text::truncate;
use super::theme;
use crate::app::{App, ProfileScreen};
use crate::metrics::profile::StepBreakdown;

const LABEL_W: usize = 27;
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let p = &app.profile;
    let title = match p.rate {
        0 => " where the time goes: profiling is off ".to_string(),
        rate => format!(" where the time goes: one decode step in {rate} profiled "),
    };
    let inner = super::screen_block(frame, area, title);
    let lines = lines(p, inner.width as usize);
    frame.render_widget(Paragraph::new(lines), inner);
}

fn sig(v: f64) -> String {
    crate::fmt::sig(v, 3)
}

/// Everything the screen shows, line by line, for `width` columns.
pub(crate) fn lines(p: &ProfileScreen, width: usize) -> Vec<Line<'static>> {
    let dim = |s: String| Line::from(Span::styled(s, theme::DIM));
    let (Some(last), Some(mean)) = (&p.last, &p.mean) else {
        let text = if p.rate == 0 {
            "Profiling is off. Start the chat with --profile (one decode step in 16) or \
             --profile-rate N: each profiled step is timed node by node through llama.cpp's \
             evaluation callback and shown here by part (attention, FFN, output head, host) \
             with the bytes it reads and its GB/s, and by layer."
        } else {
            "No profiled step yet: send a message. Its profiled decode steps show here as they \
             come."
        };
        return super::text::wrap(&[Span::styled(text, theme::DIM)], width.max(10), &[], &[]);
    };
    let mut out = vec![Line::from(vec![Span::styled(
        format!(
            "last profiled step: depth {}, {} row{}, {} ms · mean of {} this turn{}: {} ms",
            last.depth,
            last.rows,
            if last.rows == 1 { "" } else { "s" },
            sig(last.wall_ms),
            mean.steps,
            if p.seen > mean.steps {
                format!(" (the latest of {})", p.seen)
            } else {
                String::new()
            },
            sig(mean.wall_ms),
        ),
        theme::METRIC_HEADER,
    )])];
    if !last.by_name {
        out.push(dim(
            "this graph's weight names are not llama.cpp's usual ones: by operation only".into(),
        ));
    }
    out.push(dim(format!(
        "{:<LABEL_W$} {:>8} {:>6}  {:<bar_w$} {:>8} {:>7} {:>5}",
        "part",
        "last ms",
        "share",
        "",
        "mean ms",
        "GB/s",
        "MBU",
        bar_w = bar_width(width),
    )));
    if last.by_name {
        out.extend(part_lines(last, mean, width));
        if let Some(strip) = layer_strip(last, width) {
            out.push(Line::from(""));
            out.extend(strip);
        }
    }
    out.push(Line::from(""));
    out.push(ops_line(mean, width));
    let spread = p.per_node.spread.as_secs_f64() * 1e6;
    out.push(dim(format!(
        "parts add up to {} of {} ms · profiling adds {}{} µs a node, taken off and shown as its own part",
        sig(last.sum_ms),
        sig(last.wall_ms),
        sig(p.per_node.per_node.as_secs_f64() * 1e6),
        if spread > 0.0 {
            format!(" ± {}", sig(spread))
        } else {
            String::new()
        },
    )));
    out
}

fn bar_width(width: usize) -> usize {
    width
        .saturating_sub(LABEL_W + 8 + 6 + 8 + 7 + 5 + 8)
        .clamp(4, 40)
}

/// One line per part: the last step's time, share and bar, the turn's mean, GB/s and MBU.
fn part_lines(last: &StepBreakdown, mean: &StepBreakdown, width: usize) -> Vec<Line<'static>> {
    let bar_w = bar_width(width);
    last.parts
        .iter()
        .map(|part| {
            let m = mean.parts.iter().find(|x| x.part == part.part);
            let filled = (part.share.clamp(0.0, 1.0) * bar_w as f64).round() as usize;
            let bar = format!("{}{}", "█".repeat(filled), " ".repeat(bar_w - filled));
            let dash = || "—".to_string();
            let mean_ms = m.map_or_else(dash, |m| sig(m.ms));
            let gb_s = part.gb_per_s.map_or_else(dash, sig);
            let mbu = part.mbu_pct.map_or_else(dash, |v| format!("{v:.0}%"));
            Line::from(vec![
                Span::styled(
                    format!("{:<LABEL_W$}", truncate(part.part, LABEL_W)),
                    theme::METRIC_LABEL,
                ),
                Span::styled(format!(" {:>8}", sig(part.ms)), theme::METRIC_VALUE),
                Span::styled(
                    format!(" {:>6}", crate::fmt::pct(Some(part.share), 1)),
                    theme::METRIC_SUB_LABEL,
                ),
                Span::raw("  "),
                Span::styled(bar, theme::GAUGE_FILLED),
                Span::raw(format!(" {mean_ms:>8} {gb_s:>7} {mbu:>5}")),
            ])
        })
        .collect()
}

/// One column per layer (the last step), its height the layer's time against the slowest.
fn layer_strip(b: &StepBreakdown, width: usize) -> Option<Vec<Line<'static>>> {
    let max = b.layers_ms.iter().copied().fold(0.0f64, f64::max);
    let median = crate::metrics::median(&b.layers_ms)?;
    if max <= 0.0 {
        return None;
    }
    let (slowest, _) = b
        .layers_ms
        .iter()
        .enumerate()
        .max_by(|a, c| a.1.total_cmp(c.1))?;
    let shown = b.layers_ms.len().min(width.saturating_sub(10).max(1));
    let columns: String = b.layers_ms[..shown]
        .iter()
        .map(|v| BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize])
        .collect();
    Some(vec![
        Line::from(vec![
            Span::styled("layers  ", theme::METRIC_LABEL),
            Span::styled(columns, theme::SPARKLINE),
        ]),
        Line::from(Span::styled(
            format!(
                "        {} layers, 0 on the left · median {} ms · slowest layer {slowest}: {} ms ({:.2}× the median)",
                b.layers_ms.len(),
                sig(median),
                sig(max),
                max / median.max(f64::MIN_POSITIVE)
            ),
            theme::DIM,
        )),
    ])
}

/// The turn's mean time by operation type, the largest first, as much as fits.
fn ops_line(mean: &StepBreakdown, width: usize) -> Line<'static> {
    let mut text = String::from("by operation (mean): ");
    for o in &mean.ops {
        let item = format!("{} {} · ", o.op, crate::fmt::pct(Some(o.share), 1));
        if super::text::width(&text) + super::text::width(&item) > width {
            break;
        }
        text.push_str(&item);
    }
    Line::from(Span::styled(
        text.trim_end_matches(" · ").to_string(),
        theme::METRIC_SUB_LABEL,
    ))
}
