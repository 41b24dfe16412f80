//! The speculative sweep's chart for the terminal (`bench --spec/--draft`, Markdown output,
//! between the table and the verdict): one line per k, the measured mean speed-up as a bar of
//! block characters on a linear scale, a line at 1.00× (no speculation) through every bar so
//! that a k that pays reaches past it, the roofline's expected speed-up as a marker on the same
//! scale (with its compute term when the sweep measured ρ, else bytes only), and the range and
//! acceptance as figures. Plain text, at most 80 columns; a pure
//! function of the points, the same ones `--plot` draws.

use unicode_width::UnicodeWidthStr;

use crate::plot::SpecPoint;

/// The widest the chart gets, in terminal columns.
pub(crate) const CHART_COLUMNS: usize = 80;
/// The most cells a bar's track has (the 1.00× line is one more column).
const MAX_TRACK_CELLS: usize = 36;
const FULL: char = '█';
/// A cell filled by 1..=7 eighths.
const PARTIAL: [char; 7] = ['▏', '▎', '▍', '▌', '▋', '▊', '▉'];
/// The 1.00× line: the speed of k = 0, no speculation.
const ONE_X: char = '│';
/// The roofline's expected speed-up.
const EXPECTED: char = '◆';
/// The legend's name for the marker: the roofline with its compute term, or bytes only.
const EXPECTED_COMPUTE_LEGEND: &str = "roofline + compute";
const EXPECTED_LEGEND: &str = "roofline expected";
/// The expected speed-up lies beyond the end of the scale.
const BEYOND: char = '»';
/// The figures' columns after the track: headers and widths.
const RANGE_HEADER: &str = "speed-up (range)";
const RANGE_WIDTH: usize = 17;
const EXPECTED_HEADER: &str = "expected";
const ACCEPT_HEADER: &str = "accept";
/// Spaces between the columns.
const GAP: &str = "  ";

/// The expectation the chart draws for `p`: with the compute term when measured, else the
/// bytes-only one.
fn shown_expected(p: &SpecPoint) -> Option<f64> {
    p.expected_compute.or(p.expected)
}

/// The scale shared by every bar: `cells_per_x` cells per 1× of speed-up, `cells` in all, so
/// that 1.00× falls exactly on a cell boundary (where the line is drawn).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Scale {
    cells_per_x: usize,
    cells: usize,
}

impl Scale {
    /// A scale from 0 to a round top (a multiple of 0.5, at least 1.5×) that holds every
    /// measured speed-up and 1.00×. An expected speed-up widens it only up to twice that, so
    /// that a roofline far above the measurement does not squeeze the bars; a marker beyond
    /// the end is drawn as `»`.
    fn new(points: &[SpecPoint], max_cells: usize) -> Self {
        let finite = |v: f64| v.is_finite() && v > 0.0;
        let measured = points
            .iter()
            .flat_map(|p| [p.speedup, p.speedup_max])
            .filter(|v| finite(*v))
            .fold(1.0, f64::max);
        let expected = points
            .iter()
            .filter(|p| p.k > 0)
            .filter_map(shown_expected)
            .filter(|v| finite(*v))
            .fold(0.0, f64::max)
            .min(2.0 * measured);
        let max_cells = max_cells.max(2);
        let top = ((measured.max(expected) * 2.0).ceil() / 2.0)
            .max(1.5)
            .min(max_cells as f64);
        // Both at least 1 and at most `max_cells`: the casts cannot wrap.
        let cells_per_x = ((max_cells as f64 / top).floor() as usize).max(1);
        let cells = ((top * cells_per_x as f64).ceil() as usize).clamp(cells_per_x, max_cells);
        Scale { cells_per_x, cells }
    }

    /// Eighths of a cell for `value`× (0 when undefined or not positive), at most the track.
    fn eighths(&self, value: f64) -> usize {
        if !value.is_finite() || value <= 0.0 {
            return 0;
        }
        let e = (value * self.cells_per_x as f64 * 8.0).round();
        (e.min((self.cells * 8) as f64)) as usize
    }

    /// The cell a point value falls in: cell i holds (i, i + 1] ÷ cells_per_x, so that 1.00×
    /// is the last cell left of the line; `None` when undefined, `Some(cells)` past the end.
    fn cell_of(&self, value: f64) -> Option<usize> {
        if !value.is_finite() || value <= 0.0 {
            return None;
        }
        let at = (value * self.cells_per_x as f64).ceil();
        Some(if at > self.cells as f64 {
            self.cells
        } else {
            (at as usize).saturating_sub(1)
        })
    }

    /// Where the 1.00× line is in a track's characters (after `cells_per_x` cells).
    fn one_x_column(&self) -> usize {
        self.cells_per_x
    }
}

/// A speed-up in at most four characters: `0.92`, `12.3`, `345`, `>999`; `—` when undefined.
fn times(v: f64) -> String {
    if !v.is_finite() || v < 0.0 {
        "—".to_string()
    } else if v < 9.995 {
        format!("{v:.2}")
    } else if v < 99.95 {
        format!("{v:.1}")
    } else if v < 999.5 {
        format!("{v:.0}")
    } else {
        ">999".to_string()
    }
}

/// One k's track: the bar, the expected marker, the 1.00× line inserted after `cells_per_x`.
fn track(p: &SpecPoint, scale: &Scale) -> String {
    let mut cells = vec![' '; scale.cells];
    let eighths = scale.eighths(p.speedup);
    for c in cells.iter_mut().take(eighths / 8) {
        *c = FULL;
    }
    if let (rest @ 1..=7, Some(c)) = (eighths % 8, cells.get_mut(eighths / 8)) {
        *c = PARTIAL[rest - 1];
    }
    // k = 0 is the baseline, not a prediction: no marker.
    let expected = shown_expected(p).filter(|_| p.k > 0);
    match expected.and_then(|e| scale.cell_of(e)) {
        Some(i) if i >= scale.cells => {
            if let Some(last) = cells.last_mut() {
                *last = BEYOND;
            }
        }
        Some(i) => cells[i] = EXPECTED,
        None => {}
    }
    cells.insert(scale.one_x_column().min(cells.len()), ONE_X);
    cells.into_iter().collect()
}

/// The measured mean with its least and greatest over the rounds: `0.92× (0.88–0.97)`.
fn range_text(p: &SpecPoint) -> String {
    if !p.speedup.is_finite() {
        return "—".to_string();
    }
    format!(
        "{}× ({}–{})",
        times(p.speedup),
        times(p.speedup_min),
        times(p.speedup_max)
    )
}

/// The axis over the tracks (`width` columns: the cells and the 1.00× line): `0×` at the
/// start, each whole × at its cell boundary (1× on the line), the top at the end; a label
/// that would run past the end ends there instead, and one that would touch the label before
/// it is left out.
fn axis(scale: &Scale, width: usize) -> String {
    let mut line = vec![' '; width];
    let mut next_free = 0;
    let mut place = |at: usize, label: &str| {
        let len = label.chars().count();
        let at = at.min(width.saturating_sub(len));
        if at >= next_free && at + len <= width {
            for (i, c) in label.chars().enumerate() {
                line[at + i] = c;
            }
            next_free = at + len + 1;
        }
    };
    place(0, "0×");
    let top = scale.cells as f64 / scale.cells_per_x as f64;
    for x in 1..=(top.floor() as usize) {
        place(x * scale.cells_per_x, &format!("{x}×"));
    }
    if top.fract() > 0.0 {
        let label = times(top);
        place(
            width,
            &format!("{}×", label.trim_end_matches('0').trim_end_matches('.')),
        );
    }
    line.into_iter().collect()
}

/// The chart: a legend, the axis with the figures' headers, one line per k. Empty when there
/// are no points. Every line at most [`CHART_COLUMNS`] wide.
pub(crate) fn chart(points: &[SpecPoint]) -> String {
    if points.is_empty() {
        return String::new();
    }
    let labels: Vec<String> = points.iter().map(|p| format!("k={}", p.k)).collect();
    let label_width = labels.iter().map(|l| l.width()).max().unwrap_or(0);
    let figures_width = GAP.len()
        + RANGE_WIDTH
        + GAP.len()
        + EXPECTED_HEADER.len()
        + GAP.len()
        + ACCEPT_HEADER.len();
    let room = CHART_COLUMNS.saturating_sub(label_width + GAP.len() + figures_width + 1);
    let scale = Scale::new(points, room.min(MAX_TRACK_CELLS));
    let track_width = scale.cells + 1;
    let legend = if points
        .iter()
        .any(|p| p.k > 0 && p.expected_compute.is_some())
    {
        EXPECTED_COMPUTE_LEGEND
    } else {
        EXPECTED_LEGEND
    };
    let mut out = format!(
        "speed-up by k: {FULL} measured mean, {EXPECTED} {legend}, {ONE_X} 1.00× (no speculation)\n"
    );
    let head = format!(
        "{:label_width$}{GAP}{}{GAP}{RANGE_HEADER:<RANGE_WIDTH$}{GAP}{EXPECTED_HEADER}{GAP}{ACCEPT_HEADER}",
        "",
        axis(&scale, track_width),
    );
    out.push_str(head.trim_end());
    out.push('\n');
    for (p, label) in points.iter().zip(&labels) {
        let expected = match shown_expected(p) {
            Some(e) if e.is_finite() && e >= 0.0 => format!("{}×", times(e)),
            _ => "—".to_string(),
        };
        let accept = match p.acceptance {
            Some(a) if a.is_finite() => format!("{:.0}%", a * 100.0),
            _ => "—".to_string(),
        };
        let line = format!(
            "{label:>label_width$}{GAP}{}{GAP}{:<RANGE_WIDTH$}{GAP}{expected:>ew$}{GAP}{accept:>aw$}",
            track(p, &scale),
            range_text(p),
            ew = EXPECTED_HEADER.len(),
            aw = ACCEPT_HEADER.len(),
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(k: u32, speedup: f64, expected: Option<f64>, acceptance: Option<f64>) -> SpecPoint {
        SpecPoint {
            k,
            speedup,
            speedup_min: speedup,
            speedup_max: speedup,
            expected,
            expected_compute: None,
            acceptance,
            alpha: acceptance,
        }
    }

    #[test]
    fn the_compute_term_is_drawn_when_measured() {
        let bytes_only = [
            point(0, 1.0, Some(1.0), None),
            point(4, 0.5, Some(3.0), Some(0.9)),
        ];
        let chart_bytes = chart(&bytes_only);
        assert!(
            chart_bytes.contains("◆ roofline expected,"),
            "{chart_bytes}"
        );
        assert!(line_of(&chart_bytes, 4).contains("3.00×"), "{chart_bytes}");
        let with_compute = [
            bytes_only[0].clone(),
            SpecPoint {
                expected_compute: Some(0.6),
                ..bytes_only[1].clone()
            },
        ];
        let chart_compute = chart(&with_compute);
        assert!(
            chart_compute.contains("◆ roofline + compute,"),
            "{chart_compute}"
        );
        let line = line_of(&chart_compute, 4);
        assert!(
            line.contains("0.60×") && !line.contains("3.00×"),
            "{chart_compute}"
        );
        for l in chart_compute.lines() {
            assert!(l.width() <= CHART_COLUMNS, "{l}");
        }
    }

    /// The chart's line for k.
    fn line_of(chart: &str, k: u32) -> String {
        let label = format!("k={k} ");
        chart
            .lines()
            .find(|l| l.trim_start().starts_with(&label))
            .unwrap_or_else(|| panic!("no line for k={k} in\n{chart}"))
            .to_string()
    }

    /// Where the track starts in a line whose label has no padding ("k=0  …").
    fn track_start(line: &str) -> usize {
        line.chars().position(|c| c == ' ').unwrap() + GAP.len()
    }

    /// The track of a line (the bar, the markers and the 1.00× line), as characters.
    fn track_of(line: &str, scale: &Scale) -> Vec<char> {
        line.chars()
            .skip(track_start(line))
            .take(scale.cells + 1)
            .collect()
    }

    /// The figures after the track: range, expected, acceptance.
    fn figures_of(line: &str, scale: &Scale) -> Vec<String> {
        let rest: String = line
            .chars()
            .skip(track_start(line) + scale.cells + 1)
            .collect();
        rest.split_whitespace().map(String::from).collect()
    }

    /// The column (in characters) where `pattern` starts.
    fn column(line: &str, pattern: &str) -> Option<usize> {
        line.find(pattern).map(|at| line[..at].chars().count())
    }

    fn count(track: &[char], c: char) -> usize {
        track.iter().filter(|x| **x == c).count()
    }

    #[test]
    fn bars_are_proportional_to_the_speedup_and_cross_the_one_x_line() {
        // Measured up to 1.5×, expected 1.9×: the scale runs to 2× in 36 cells, 18 per 1×.
        let points = [
            point(0, 1.0, Some(1.0), None),
            point(2, 1.5, Some(1.9), Some(0.8)),
            point(4, 0.25, None, Some(0.3)),
            point(8, 0.8125, None, Some(0.1)),
        ];
        let scale = Scale::new(&points, MAX_TRACK_CELLS);
        assert_eq!(
            scale,
            Scale {
                cells_per_x: 18,
                cells: 36
            }
        );
        let chart = chart(&points);
        let base = track_of(&line_of(&chart, 0), &scale);
        // 1.00× = 18 cells, the line right after them.
        assert_eq!(count(&base, FULL), 18, "{chart}");
        assert_eq!(base.iter().position(|c| *c == ONE_X), Some(18), "{chart}");
        assert!(!base.contains(&EXPECTED), "k = 0 has no marker: {chart}");
        let two = track_of(&line_of(&chart, 2), &scale);
        // 1.5× = 27 cells: 18 before the line, 9 after it.
        assert_eq!(count(&two, FULL), 27, "{chart}");
        assert_eq!(two.iter().position(|c| *c == ONE_X), Some(18), "{chart}");
        assert!(two[..18].iter().all(|c| *c == FULL), "{chart}");
        assert!(two[19..28].iter().all(|c| *c == FULL), "{chart}");
        // 1.9× falls in cell 34 (34.2 cells), the 35th character after the line.
        assert_eq!(two.iter().position(|c| *c == EXPECTED), Some(35), "{chart}");
        // 0.25× = 4.5 cells: 4 full and a half.
        let four = track_of(&line_of(&chart, 4), &scale);
        assert_eq!(count(&four, FULL), 4, "{chart}");
        assert_eq!(four[4], '▌', "{chart}");
        // 0.8125× = 14.625 cells: 14 full and five eighths.
        let eight = track_of(&line_of(&chart, 8), &scale);
        assert_eq!(count(&eight, FULL), 14, "{chart}");
        assert_eq!(eight[14], '▋', "{chart}");
        assert_eq!(eight.iter().position(|c| *c == ONE_X), Some(18), "{chart}");
        // The axis puts 0× at the start, 1× over the line and 2× at the end (ending there).
        let axis = chart.lines().nth(1).unwrap();
        let start = track_start(&line_of(&chart, 0));
        assert_eq!(column(axis, "0×"), Some(start), "{chart}");
        assert_eq!(column(axis, "1×"), Some(start + 18), "{chart}");
        assert_eq!(column(axis, "2×"), Some(start + 35), "{chart}");
        assert_eq!(
            column(axis, "speed-up (range)"),
            column(&line_of(&chart, 2), "1.50×"),
            "{chart}"
        );
        assert_eq!(
            figures_of(&line_of(&chart, 2), &scale),
            ["1.50×", "(1.50–1.50)", "1.90×", "80%"]
        );
        assert_eq!(
            figures_of(&line_of(&chart, 0), &scale),
            ["1.00×", "(1.00–1.00)", "1.00×", "—"],
            "no acceptance at k = 0"
        );
    }

    #[test]
    fn the_scale_spans_a_tenth_to_five_times() {
        let points = [
            point(0, 1.0, Some(1.0), None),
            point(2, 0.1, Some(0.2), Some(0.05)),
            point(4, 5.0, Some(4.0), Some(1.0)),
        ];
        let scale = Scale::new(&points, MAX_TRACK_CELLS);
        assert_eq!(
            scale,
            Scale {
                cells_per_x: 7,
                cells: 35
            }
        );
        let chart = chart(&points);
        // 0.1× = 0.7 cells: six eighths, still visible; its expected 0.2× in the first cell
        // after it.
        let two = track_of(&line_of(&chart, 2), &scale);
        assert_eq!(two[..2], ['▊', EXPECTED], "{chart}");
        let five = track_of(&line_of(&chart, 4), &scale);
        // 5× fills the track; the expected 4× (cell 27, after the line) is drawn over it.
        assert_eq!(count(&five, FULL), 34, "{chart}");
        assert_eq!(
            five.iter().position(|c| *c == EXPECTED),
            Some(28),
            "{chart}"
        );
        assert_eq!(five.iter().position(|c| *c == ONE_X), Some(7), "{chart}");
        assert_eq!(
            figures_of(&line_of(&chart, 4), &scale),
            ["5.00×", "(5.00–5.00)", "4.00×", "100%"]
        );
        let axis = chart.lines().nth(1).unwrap();
        let start = track_start(&line_of(&chart, 0));
        assert_eq!(column(axis, "4×"), Some(start + 28), "{chart}");
        assert_eq!(column(axis, "5×"), Some(start + 34), "{chart}");
    }

    #[test]
    fn an_expected_speedup_far_above_the_measured_one_is_off_the_scale() {
        // Measured at most 1×: the scale stops at 2×, and 9× is `»` at the end.
        let points = [
            point(0, 1.0, Some(1.0), None),
            point(8, 0.9, Some(9.0), Some(0.7)),
        ];
        let scale = Scale::new(&points, MAX_TRACK_CELLS);
        assert_eq!(scale.cells_per_x, 18);
        let chart = chart(&points);
        let eight = track_of(&line_of(&chart, 8), &scale);
        assert_eq!(eight.last(), Some(&BEYOND), "{chart}");
        assert!(!eight.contains(&EXPECTED), "{chart}");
        assert_eq!(figures_of(&line_of(&chart, 8), &scale)[2], "9.00×");
    }

    #[test]
    fn missing_and_undefined_values_draw_nothing_and_read_as_a_dash() {
        let points = [
            point(0, 1.0, None, None),
            point(2, f64::NAN, Some(f64::NAN), None),
            point(3, 0.0, Some(f64::INFINITY), Some(f64::NAN)),
            point(4, f64::INFINITY, None, Some(0.5)),
            SpecPoint {
                speedup_min: f64::NAN,
                speedup_max: f64::NEG_INFINITY,
                ..point(6, 1.2, Some(-1.0), Some(0.4))
            },
        ];
        let scale = Scale::new(&points, MAX_TRACK_CELLS);
        let chart = chart(&points);
        for k in [2, 3, 4] {
            let track = track_of(&line_of(&chart, k), &scale);
            assert_eq!(count(&track, FULL), 0, "k={k}: {chart}");
            assert!(!track.contains(&EXPECTED), "k={k}: {chart}");
            assert_eq!(
                track.iter().filter(|c| **c != ' ').count(),
                1,
                "k={k}: {chart}"
            );
        }
        assert_eq!(figures_of(&line_of(&chart, 2), &scale), ["—", "—", "—"]);
        assert_eq!(
            figures_of(&line_of(&chart, 3), &scale),
            ["0.00×", "(0.00–0.00)", "—", "—"]
        );
        assert_eq!(figures_of(&line_of(&chart, 4), &scale), ["—", "—", "50%"]);
        assert_eq!(
            figures_of(&line_of(&chart, 6), &scale),
            ["1.20×", "(—–—)", "—", "40%"]
        );
        assert_eq!(super::chart(&[]), "");
        for line in chart.lines() {
            assert!(line.width() <= CHART_COLUMNS, "{line}");
        }
    }

    #[test]
    fn every_line_fits_in_80_columns() {
        for points in [
            vec![
                point(0, 1.0, Some(1.0), None),
                point(2, 1.1, Some(1.3), Some(0.5)),
            ],
            vec![
                point(0, 1.0, Some(1.0), None),
                point(256, 1234.5, Some(99999.0), Some(1.0)),
                SpecPoint {
                    speedup_min: 0.001,
                    speedup_max: 5000.0,
                    ..point(128, 45.6, Some(0.0), Some(0.999))
                },
            ],
            vec![point(0, 1.0, None, None), point(u32::MAX, 0.5, None, None)],
        ] {
            let chart = chart(&points);
            assert_eq!(chart.lines().count(), points.len() + 2, "{chart}");
            for line in chart.lines() {
                assert!(
                    line.width() <= CHART_COLUMNS,
                    "{} > 80: {line}",
                    line.width()
                );
            }
            // The line at 1.00× is in the same column on every k's line.
            let columns: Vec<usize> = chart
                .lines()
                .skip(2)
                .map(|l| l.chars().position(|c| c == ONE_X).unwrap())
                .collect();
            assert!(columns.windows(2).all(|w| w[0] == w[1]), "{chart}");
        }
    }

    #[test]
    fn speedups_print_in_four_characters() {
        assert_eq!(times(0.923), "0.92");
        assert_eq!(times(12.34), "12.3");
        assert_eq!(times(345.6), "346");
        assert_eq!(times(1e9), ">999");
        assert_eq!(times(f64::NAN), "—");
    }
}
