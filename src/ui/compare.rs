//! The compare screen: the latest table written by `tokscope compare` (read from the
//! comparisons log by the loop, never here): quality beside speed for each candidate, the
//! Pareto front marked, and the verdict in words. Columns that do not fit are left out, least
//! important first. Reads `app.compare`.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::Frame;

use super::text::{one_line, truncate, truncate_start, width, wrap};
use super::theme;
use crate::app::{App, CompareView};
use crate::compare::{CompareRow, Comparison};

/// One column: header, width, priority (lower is kept longer), right-aligned, value.
struct Column {
    header: &'static str,
    width: u16,
    priority: u8,
    right: bool,
    value: fn(&CompareRow) -> String,
}

const CANDIDATE_MIN_WIDTH: u16 = 12;

fn columns() -> Vec<Column> {
    let col = |header, width, priority, right, value| Column {
        header,
        width,
        priority,
        right,
        value,
    };
    vec![
        col("", 1, 0, false, |r| {
            if r.pareto && r.tg_tok_per_s.is_some() {
                "★".into()
            } else {
                String::new()
            }
        }),
        // The candidate column is sized to what is left (see `layout`).
        col("candidate", CANDIDATE_MIN_WIDTH, 0, false, |r| {
            if r.reference {
                format!("{} (ref)", r.label)
            } else {
                r.label.clone()
            }
        }),
        // The type alone: a requantized row's source is in its candidate name.
        col("quant", 7, 1, false, |r| {
            r.quantization
                .split(" ← ")
                .next()
                .unwrap_or_default()
                .to_string()
        }),
        col("bpw", 5, 5, true, |r| format!("{:.2}", r.bits_per_weight)),
        col("PPL", 8, 2, true, |r| quality(r, Some(r.quality.ppl), 3)),
        col("KLD mean", 9, 1, true, |r| {
            quality(r, r.quality.kld_mean, 5)
        }),
        col("KLD p99", 9, 6, true, |r| quality(r, r.quality.kld_p99, 5)),
        col("same top%", 9, 4, true, |r| {
            quality(r, r.quality.same_top_pct, 1)
        }),
        col("pp t/s", 8, 7, true, |r| crate::fmt::opt(r.pp_tok_per_s, 1)),
        // With its spread, as the table prints it: a difference inside it is not one.
        col("tg t/s", 12, 1, true, |r| {
            match (r.tg_tok_per_s, r.tg_tok_per_s_sd) {
                (Some(m), Some(sd)) => format!("{m:.1}±{sd:.1}"),
                (Some(m), None) => format!("{m:.1}±—"),
                _ => "—".to_string(),
            }
        }),
        col("MBU %", 7, 8, true, |r| {
            r.mbu_pct.map_or_else(
                || "—".to_string(),
                |m| crate::metrics::roofline::mbu_pct_cell(m, 1).replace('%', ""),
            )
        }),
        col("$/1M tok", 8, 9, true, |r| {
            crate::fmt::opt(r.cost_per_million_tokens_usd, 3)
        }),
    ]
}

/// A quality figure, or `n/m` (not meaningful) for synthetic weights, which have no quality
/// to lose.
fn quality(r: &CompareRow, v: Option<f64>, digits: usize) -> String {
    if r.synthetic {
        "n/m".to_string()
    } else {
        crate::fmt::opt(v, digits)
    }
}

/// The columns that fit `avail` columns (one space between each), in display order, and the
/// candidate column's width.
fn layout(all: Vec<Column>, avail: u16, longest_label: u16) -> (Vec<Column>, u16) {
    let total = |cols: &[&Column]| -> u16 {
        cols.iter().map(|c| c.width).sum::<u16>() + cols.len().saturating_sub(1) as u16
    };
    let mut priorities: Vec<u8> = all.iter().map(|c| c.priority).collect();
    priorities.sort_unstable();
    priorities.dedup();
    let mut keep = 0u8;
    for p in priorities {
        let cols: Vec<&Column> = all.iter().filter(|c| c.priority <= p).collect();
        if total(&cols) <= avail {
            keep = p;
        }
    }
    let kept: Vec<Column> = all.into_iter().filter(|c| c.priority <= keep).collect();
    let used = total(&kept.iter().collect::<Vec<_>>());
    let candidate = (CANDIDATE_MIN_WIDTH + avail.saturating_sub(used))
        .min(longest_label.max(CANDIDATE_MIN_WIDTH));
    (kept, candidate)
}

pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let inner = super::screen_block(
        frame,
        area,
        " compare: quality beside speed (`tokscope compare`'s log) ".into(),
    );
    let w = inner.width as usize;
    let [body, footer] = Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(inner);
    let short = "★ front · ↑↓ row · Enter A/B · m switch · ←→ older/newer · Esc";
    let keys = [
        "★ Pareto front · ↑↓ a row · Enter A/B with its model · m switches to it · ←→ older/newer · r reloads · Esc closes",
        short,
    ]
    .into_iter()
    .find(|k| width(k) <= w)
    .unwrap_or(short);
    frame.render_widget(
        Paragraph::new(Span::styled(truncate(keys, w), theme::DIM)),
        footer,
    );
    let message =
        |text: String, style| Paragraph::new(wrap(&[Span::styled(text, style)], w, &[], &[]));
    match &app.compare {
        CompareView::Reading => {
            frame.render_widget(message("reading the comparisons log…".into(), theme::DIM), body)
        }
        CompareView::Empty => frame.render_widget(
            message(
                "no comparison yet — run `tokscope compare -m A.gguf -m B.gguf …` (or `tokscope compare -m F16.gguf --quantize q8_0,q4_k_m`) and open this screen again".into(),
                theme::NOTICE_INFO,
            ),
            body,
        ),
        CompareView::Failed(e) => frame.render_widget(
            message(format!("the comparisons log could not be read: {e}"), theme::NOTICE_ERROR),
            body,
        ),
        CompareView::Loaded(c) => draw_comparison(frame, body, c, app),
    }
}

fn draw_comparison(frame: &mut Frame, area: Rect, c: &Comparison, app: &App) {
    let w = area.width as usize;
    let place = app.compare_place;
    let which = if place.total > 0 {
        format!(
            " ({} of {}, ←→ older/newer)",
            place.total.saturating_sub(place.back),
            place.total
        )
    } else {
        String::new()
    };
    let about = format!(
        "{}{which} · {} ({} tokens) · {} chunks of {} · reference {}",
        c.id, c.text, c.text_tokens, c.chunks, c.n_ctx, c.reference
    );
    let mut verdict: Vec<Line<'static>> = c
        .verdict
        .iter()
        .flat_map(|line| {
            let line = [Span::styled(one_line(line), theme::HELP_TEXT)];
            wrap(&line, w, &[], &[Span::raw("  ")])
        })
        .collect();
    if c.rows.iter().any(|r| r.synthetic) {
        let note = format!("Note: {}.", crate::engine::ModelInfo::SYNTHETIC_LABEL);
        verdict.extend(wrap(&[Span::styled(note, theme::SYNTHETIC)], w, &[], &[]));
    }
    let table_h = (c.rows.len() as u16 + 1).min(area.height.saturating_sub(1));
    let verdict_room = area.height.saturating_sub(1 + table_h + 1);
    let [about_area, table_area, _, verdict_area] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(table_h),
        Constraint::Length(u16::from(verdict_room > 0)),
        Constraint::Min(0),
    ])
    .areas(area);
    frame.render_widget(
        Paragraph::new(Span::styled(truncate(&about, w), theme::DIM)),
        about_area,
    );
    let longest = c
        .rows
        .iter()
        .map(|r| width(&r.label) + if r.reference { 6 } else { 0 })
        .max()
        .unwrap_or(0) as u16;
    let (cols, candidate_w) = layout(columns(), area.width, longest);
    let col_w = |col: &Column| {
        if col.header == "candidate" {
            candidate_w
        } else {
            col.width
        }
    };
    let widths: Vec<Constraint> = cols
        .iter()
        .map(|col| Constraint::Length(col_w(col)))
        .collect();
    let cell = |text: String, col: &Column, style| {
        // A candidate is told apart by the end of its name (`-Q8_0 ← Q4_K_M`): cut its start.
        let cut = if col.header == "candidate" {
            truncate_start(&one_line(&text), col_w(col) as usize)
        } else {
            truncate(&one_line(&text), col_w(col) as usize)
        };
        let line = Line::from(Span::styled(cut, style));
        Cell::from(if col.right {
            line.right_aligned()
        } else {
            line
        })
    };
    let header = Row::new(
        cols.iter()
            .map(|col| cell(col.header.to_string(), col, theme::TABLE_HEADER)),
    );
    let rows = c.rows.iter().enumerate().map(|(i, r)| {
        let style = if r.pareto {
            theme::PARETO
        } else {
            theme::DOMINATED
        };
        let row = Row::new(cols.iter().map(|col| {
            let style = if col.header.is_empty() || col.header == "candidate" {
                style
            } else {
                theme::METRIC_VALUE
            };
            cell((col.value)(r), col, style)
        }));
        // The selected row (↑↓): Enter runs A/B with its model, m switches to it.
        if i == app.compare_row {
            row.style(ratatui::style::Style::new().add_modifier(ratatui::style::Modifier::REVERSED))
        } else {
            row
        }
    });
    frame.render_widget(
        Table::new(rows, widths).header(header).column_spacing(1),
        table_area,
    );
    frame.render_widget(Paragraph::new(verdict), verdict_area);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_screens_drop_the_least_important_columns() {
        let (wide, _) = layout(columns(), 200, 20);
        assert_eq!(wide.len(), columns().len());
        let (narrow, candidate) = layout(columns(), 78, 20);
        let headers: Vec<&str> = narrow.iter().map(|c| c.header).collect();
        assert!(headers.contains(&"tg t/s") && headers.contains(&"KLD mean"));
        assert!(!headers.contains(&"$/1M tok"));
        let used: u16 = narrow.iter().map(|c| c.width).sum::<u16>() + narrow.len() as u16 - 1;
        assert!(used - CANDIDATE_MIN_WIDTH + candidate <= 78);
    }
}
