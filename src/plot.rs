//! Charts as files: the batch sweep (throughput and inter-token latency against the batch
//! size) and the bandwidth roofline (decode speed against bytes read per token), drawn with
//! `plotters` to PNG or SVG as the output path's extension says. Inputs are plain structs so
//! that `bench` (or anything else) can call these without knowing about plotters; the text is
//! set in DejaVu Sans compiled into the binary, so no system font library is needed.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;
use thiserror::Error;

use crate::metrics::roofline::DepthPoint;
use crate::metrics::BatchPoint;

/// One measured decode speed on the roofline.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RooflinePoint {
    /// Shown next to the point (a model, a depth, a batch size …).
    pub label: String,
    /// Bytes read per decode step (weights + KV cache), see `metrics::roofline`.
    pub bytes_per_token: f64,
    pub tok_per_s: f64,
}

/// The file formats a chart can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlotKind {
    Png,
    Svg,
}

/// The extensions `plot_file_kind` accepts, for messages.
const ACCEPTED_EXTENSIONS: &str = "png, svg";

#[derive(Debug, Error)]
pub(crate) enum PlotError {
    #[error("cannot tell the chart format of {path}: extension '{extension}' is not one of {ACCEPTED_EXTENSIONS}")]
    UnknownExtension { path: PathBuf, extension: String },
    #[error("cannot tell the chart format of {path}: it has no extension (use one of {ACCEPTED_EXTENSIONS})")]
    NoExtension { path: PathBuf },
    #[error("nothing to plot in the {chart} chart: no point with finite, positive values")]
    NoPoints { chart: &'static str },
    /// Written as every output is (`fsx::Output`): never through a link, an existing file
    /// only with --force.
    #[error(transparent)]
    Write(#[from] crate::fsx::WriteError),
    #[error("drawing the chart {path} failed: {message}")]
    Draw { path: PathBuf, message: String },
}

/// The chart format of `path`, from its extension (case-insensitive).
pub(crate) fn plot_file_kind(path: &Path) -> Result<PlotKind, PlotError> {
    let Some(extension) = path.extension() else {
        return Err(PlotError::NoExtension {
            path: path.to_path_buf(),
        });
    };
    let extension = extension.to_string_lossy();
    match extension.to_ascii_lowercase().as_str() {
        "png" => Ok(PlotKind::Png),
        "svg" => Ok(PlotKind::Svg),
        _ => Err(PlotError::UnknownExtension {
            path: path.to_path_buf(),
            extension: extension.into_owned(),
        }),
    }
}

/// Throughput (aggregate and per sequence) and inter-token latency (p50, p99) against the
/// batch size, on a log2 axis: two panels sharing the x axis. Points with a zero batch size
/// or a non-finite or negative value are left out of the series they would spoil.
pub(crate) fn plot_batch_sweep(
    points: &[BatchPoint],
    title: &str,
    subtitle: &str,
    out: impl Into<crate::fsx::Output>,
) -> Result<(), PlotError> {
    let out = out.into();
    let kind = plot_file_kind(&out.path)?;
    let chart = BatchSweepChart::new(points).ok_or(PlotError::NoPoints {
        chart: "batch sweep",
    })?;
    render(&chart, (title, subtitle), kind, &out, (1200, 900))
}

/// Decode speed against bytes read per token, log-log, under the bandwidth ceiling
/// `tok/s = bandwidth / bytes per token`; every point is labelled with its name, speed and
/// share of the ceiling. Points with non-finite or non-positive values are left out. A
/// bandwidth that is not a positive number draws no ceiling (and says so).
pub(crate) fn plot_roofline(
    points: &[RooflinePoint],
    bandwidth_bytes_per_s: f64,
    bandwidth_label: &str,
    title: &str,
    subtitle: &str,
    out: impl Into<crate::fsx::Output>,
) -> Result<(), PlotError> {
    let out = out.into();
    let kind = plot_file_kind(&out.path)?;
    let chart = RooflineChart::new(points, bandwidth_bytes_per_s, bandwidth_label)
        .ok_or(PlotError::NoPoints { chart: "roofline" })?;
    let height = 800 + key_height(chart.points.len());
    render(&chart, (title, subtitle), kind, &out, (1200, height))
}

/// A depth sweep (`bench -d`): decode speed against the depth of the KV cache, measured beside
/// what the bytes predict (depth 0's speed × depth 0's bytes ÷ the bytes there) and the
/// ceiling, over the bytes a step reads there (all, and the KV cache's part). Needs a
/// depth-0 point for the prediction; points with non-finite or non-positive values are left
/// out.
pub(crate) fn plot_depth_sweep(
    points: &[DepthPoint],
    title: &str,
    subtitle: &str,
    out: impl Into<crate::fsx::Output>,
) -> Result<(), PlotError> {
    let out = out.into();
    let kind = plot_file_kind(&out.path)?;
    let chart = DepthSweepChart::new(points).ok_or(PlotError::NoPoints {
        chart: "depth sweep",
    })?;
    render(&chart, (title, subtitle), kind, &out, (1200, 900))
}

// ---------------------------------------------------------------------------------------------
// Rendering

/// The family every text style names; the embedded font is registered under it.
const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");

/// The points `keep` keeps, or that the `chart` has nothing to plot.
fn kept<P: Clone>(
    points: &[P],
    chart: &'static str,
    keep: impl Fn(&P) -> bool,
) -> Result<Vec<P>, PlotError> {
    let kept: Vec<P> = points.iter().filter(|p| keep(p)).cloned().collect();
    if kept.is_empty() {
        return Err(PlotError::NoPoints { chart });
    }
    Ok(kept)
}

/// Registers the embedded font once. `false` if the bytes are not a font (never, unless the
/// asset is replaced by something broken).
fn font_registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED
        .get_or_init(|| plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok())
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A chart that can be drawn on any plotters backend: on `body`, the area under the header,
/// and (for tags anywhere) on the whole `root`.
trait Chart {
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        body: DrawingArea<DB, Shift>,
    ) -> DrawResult<DB>;
}

/// Draws `chart` under its header (`title`, `subtitle`) on a white canvas of `size` pixels and
/// writes it to `out` (whole or not at all, never through a link: `fsx::Output`).
fn render<C: Chart>(
    chart: &C,
    (title, subtitle): (&str, &str),
    kind: PlotKind,
    out: &crate::fsx::Output,
    size: (u32, u32),
) -> Result<(), PlotError> {
    let draw_error = |message: String| PlotError::Draw {
        path: out.path.clone(),
        message,
    };
    if !font_registered() {
        return Err(draw_error("the embedded font could not be loaded".into()));
    }
    fn draw_on<DB: DrawingBackend>(
        chart: &impl Chart,
        (title, subtitle): (&str, &str),
        root: DrawingArea<DB, Shift>,
    ) -> Result<(), String> {
        root.fill(&WHITE)
            .and_then(|()| header(&root, title, subtitle))
            .and_then(|body| chart.draw(&root, body))
            .and_then(|()| root.present())
            .map_err(|e| e.to_string())
    }
    match kind {
        PlotKind::Svg => {
            out.check()?;
            let mut svg = String::new();
            let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
            draw_on(chart, (title, subtitle), root).map_err(draw_error)?;
            Ok(out.write(svg.as_bytes())?)
        }
        PlotKind::Png => {
            // The encoder writes to a path: give it one in a private folder, then move the
            // file into place. An unwritable path is reported here, before drawing.
            let staged = out.stage()?;
            let root = BitMapBackend::new(staged.path(), size).into_drawing_area();
            draw_on(chart, (title, subtitle), root).map_err(draw_error)?;
            Ok(staged.commit()?)
        }
    }
}

// Text sizes in pixels on the 1200-pixel-wide canvases. Even sizes only: plotters' ab_glyph
// renderer truncates half a size when placing each glyph, which with odd sizes lifts glyphs
// that sit at the baseline (the decimal point) a pixel above their neighbours.
const TITLE_PX: u32 = 30;
const CAPTION_PX: u32 = 22;
const AXIS_DESC_PX: u32 = 20;
const TICK_LABEL_PX: u32 = 16;
const LEGEND_PX: u32 = 18;
const POINT_LABEL_PX: u32 = 16;

const AGGREGATE_COLOR: RGBColor = RGBColor(31, 119, 180);
const PER_SEQUENCE_COLOR: RGBColor = RGBColor(255, 127, 14);
const P50_COLOR: RGBColor = RGBColor(44, 160, 44);
const P99_COLOR: RGBColor = RGBColor(214, 39, 40);
const CEILING_COLOR: RGBColor = RGBColor(90, 90, 90);
const MEASURED_COLOR: RGBColor = RGBColor(31, 119, 180);
const GRID_COLOR: RGBColor = RGBColor(225, 225, 225);

/// The legend box every chart uses, in the upper right corner, or the upper left where that
/// is clearer (the speculative sweep's panels: above k = 0's point at 1× and beside
/// acceptance, which k = 0 does not have).
fn draw_legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    at: SeriesLabelPosition,
) -> DrawResult<DB> {
    chart
        .configure_series_labels()
        .position(at)
        .label_font(text(LEGEND_PX))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.5))
        .margin(10)
        .draw()
}

fn text(size: u32) -> TextStyle<'static> {
    (FONT, size).into_font().color(&BLACK)
}

const SUBTITLE_PX: u32 = 18;
const KEY_PX: u32 = 16;
/// A row of the key table under a chart.
const KEY_ROW_PX: u32 = 24;
/// At most this many rows in the key table; the rest are counted in a last line.
const KEY_MAX_ROWS: usize = 30;
const SUBTITLE_COLOR: RGBColor = RGBColor(80, 80, 80);

/// The grid, axis descriptions and tick label styles every chart shares, with the y ticks as
/// plain numbers; the caller adds its x labels and draws.
fn mesh<'a, 'b, X, Y, DB>(
    chart: &'b mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    x_desc: impl Into<String>,
    y_desc: impl Into<String>,
) -> MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    DB: DrawingBackend,
{
    fn y_label(y: &f64) -> String {
        trim_number(*y)
    }
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE)
        .bold_line_style(GRID_COLOR)
        .x_desc(x_desc)
        .y_desc(y_desc)
        .axis_desc_style(text(AXIS_DESC_PX))
        .label_style(text(TICK_LABEL_PX))
        .y_label_formatter(&y_label);
    mesh
}

/// The chart's header: the title, and under it a smaller line saying what the chart shows
/// (models, backend, threads, test). Returns the area below it.
fn header<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    subtitle: &str,
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    let width = root.dim_in_pixel().0 as i32;
    let center = Pos::new(HPos::Center, VPos::Top);
    root.draw(&Text::new(
        title.to_string(),
        (width / 2, 10),
        text(TITLE_PX).pos(center),
    ))?;
    // Cut, never run off the canvas: measured with the font (a guessed width per character
    // let a subtitle of capitals and digits run off both edges).
    let style = text(SUBTITLE_PX).color(&SUBTITLE_COLOR).pos(center);
    let line = fit_width(root, subtitle, &style, (width - 40).max(0) as u32);
    root.draw(&Text::new(line, (width / 2, 16 + TITLE_PX as i32), style))?;
    Ok(root.margin((TITLE_PX + SUBTITLE_PX + 26) as i32, 0, 0, 0))
}

/// `line` in at most `max_px` pixels of `style`, cut to end in `…` when wider (the longest cut
/// that fits, by bisection on the characters kept). A font that cannot measure keeps it whole.
fn fit_width<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    line: &str,
    style: &TextStyle<'_>,
    max_px: u32,
) -> String {
    let fits = |s: &str| {
        root.estimate_text_size(s, style)
            .map_or(true, |(w, _)| w <= max_px)
    };
    if fits(line) {
        return line.to_string();
    }
    let (mut lo, mut hi) = (1, line.chars().count());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(&crate::text::ellipsis(line, mid)) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    crate::text::ellipsis(line, lo)
}

/// The height the key table under a chart takes for `rows` entries.
fn key_height(rows: usize) -> u32 {
    let shown = rows.min(KEY_MAX_ROWS) + usize::from(rows > KEY_MAX_ROWS);
    // The header row, the rows, and a margin.
    (shown as u32 + 1) * KEY_ROW_PX + 20
}

/// `body` split into the plot and, under it, the key table for `rows` entries.
fn split_key<DB: DrawingBackend>(
    body: DrawingArea<DB, Shift>,
    rows: usize,
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    body.split_vertically(body.dim_in_pixel().1.saturating_sub(key_height(rows)))
}

/// The key table under a chart: a header and one row per point, each cell at its column's x
/// (left-aligned, in pixels from the left edge), so that a point's number on the plot finds
/// its full name and figures here however crowded the plot is.
fn draw_key<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    columns: &[(&str, i32)],
    rows: &[Vec<String>],
) -> DrawResult<DB> {
    // The header and the closing line in grey, the rows in black.
    let style = |color| {
        text(KEY_PX)
            .color(color)
            .pos(Pos::new(HPos::Left, VPos::Top))
    };
    let y = |row: usize| 4 + KEY_ROW_PX as i32 * row as i32;
    for (name, x) in columns {
        area.draw(&Text::new(
            name.to_string(),
            (*x, 4),
            style(&SUBTITLE_COLOR),
        ))?;
    }
    for (i, row) in rows.iter().take(KEY_MAX_ROWS).enumerate() {
        for ((_, x), cell) in columns.iter().zip(row) {
            area.draw(&Text::new(cell.clone(), (*x, y(i + 1)), style(&BLACK)))?;
        }
    }
    if rows.len() > KEY_MAX_ROWS {
        let more = rows.len() - KEY_MAX_ROWS;
        area.draw(&Text::new(
            format!("… and {more} more (see the table output)"),
            (columns.first().map_or(0, |c| c.1), y(KEY_MAX_ROWS + 1)),
            style(&SUBTITLE_COLOR),
        ))?;
    }
    Ok(())
}

/// A box in pixels: left, top, right, bottom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rect {
    x0: i32,
    y0: i32,
    x1: i32,
    y1: i32,
}

impl Rect {
    fn overlaps(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }

    fn inside(&self, o: &Rect) -> bool {
        self.x0 >= o.x0 && self.x1 <= o.x1 && self.y0 >= o.y0 && self.y1 <= o.y1
    }
}

/// The width in pixels of a short tag ("12") at `px`: DejaVu Sans digits are 0.64 em.
fn tag_width(tag: &str, px: u32) -> i32 {
    (tag.chars().count() as f64 * 0.64 * f64::from(px)).ceil() as i32 + 4
}

/// Places each point's tag (its number) beside it, in pixels: the first spot, among eight
/// around the point at growing distances, whose box stays inside `bounds` and overlaps no
/// point marker (`radius` around every point), no other `obstacles` (the legend) and no tag
/// placed before. `None` for a point whose every spot is taken (the key table still lists
/// it). Returns each tag's box.
fn place_tags(
    points: &[(i32, i32)],
    tags: &[String],
    px: u32,
    radius: i32,
    bounds: Rect,
    obstacles: &[Rect],
) -> Vec<Option<Rect>> {
    let h = px as i32 + 2;
    let mut markers: Vec<Rect> = points
        .iter()
        .map(|&(x, y)| Rect {
            x0: x - radius,
            y0: y - radius,
            x1: x + radius + 1,
            y1: y + radius + 1,
        })
        .collect();
    markers.extend_from_slice(obstacles);
    let mut placed: Vec<Rect> = Vec::new();
    points
        .iter()
        .zip(tags)
        .map(|(&(x, y), tag)| {
            let w = tag_width(tag, px);
            let spot = (1..=4).find_map(|ring| {
                let d = radius + 3 + (ring - 1) * (h + 2);
                // Right, left, above, below, then the corners.
                let offsets = [
                    (d, -h / 2),
                    (-d - w, -h / 2),
                    (-w / 2, -d - h),
                    (-w / 2, d),
                    (d, -d - h),
                    (-d - w, -d - h),
                    (d, d),
                    (-d - w, d),
                ];
                offsets.iter().find_map(|&(dx, dy)| {
                    let r = Rect {
                        x0: x + dx,
                        y0: y + dy,
                        x1: x + dx + w,
                        y1: y + dy + h,
                    };
                    (r.inside(&bounds)
                        && !markers.iter().any(|m| m.overlaps(&r))
                        && !placed.iter().any(|p| p.overlaps(&r)))
                    .then_some(r)
                })
            });
            if let Some(r) = spot {
                placed.push(r);
            }
            spot
        })
        .collect()
}

/// Where `draw_legend` puts the legend (upper right, 10 px in), generously: its box for
/// `lines` entries, so that no tag is placed under it.
fn legend_box(xs: &Range<i32>, ys: &Range<i32>, lines: &[String]) -> Rect {
    let longest = lines.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let w = (longest as f64 * 0.6 * f64::from(LEGEND_PX)) as i32 + 70;
    let h = lines.len() as i32 * (LEGEND_PX as i32 + 10) + 24;
    Rect {
        x0: xs.end - 10 - w,
        y0: ys.start,
        x1: xs.end,
        y1: ys.start + 10 + h,
    }
}

/// Draws each placed tag at its box, and a thin line from its point when the tag sits away
/// from it (a ring further out).
fn draw_tags<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    points: &[(i32, i32)],
    tags: &[String],
    boxes: &[Option<Rect>],
    color: RGBColor,
) -> DrawResult<DB> {
    let style = text(POINT_LABEL_PX)
        .color(&color)
        .pos(Pos::new(HPos::Left, VPos::Top));
    for ((&(x, y), tag), b) in points.iter().zip(tags).zip(boxes) {
        let Some(b) = b else { continue };
        let (cx, cy) = ((b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2);
        if (cx - x).abs() > 30 || (cy - y).abs() > 30 {
            root.draw(&PathElement::new(
                vec![(x, y), (cx, cy)],
                color.mix(0.4).stroke_width(1),
            ))?;
        }
        root.draw(&Text::new(tag.clone(), (b.x0 + 2, b.y0 + 1), style.clone()))?;
    }
    Ok(())
}

/// Numbers the points `at` (pixels) 1, 2, … with tags beside them on `root`, clear of one
/// another and of the legend of `legend_lines` inside the plotting area `plot` (pixels):
/// [`place_tags`] with markers of 8 px. Returns each tag's box, `None` where the plot had no
/// room for it.
fn tag_points<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    at: &[(i32, i32)],
    (xs, ys): &(Range<i32>, Range<i32>),
    legend_lines: &[String],
    color: RGBColor,
) -> Result<Vec<Option<Rect>>, DrawingAreaErrorKind<DB::ErrorType>> {
    let tags: Vec<String> = (1..=at.len()).map(|i| i.to_string()).collect();
    let plot = Rect {
        x0: xs.start,
        y0: ys.start,
        x1: xs.end,
        y1: ys.end,
    };
    let legend = [legend_box(xs, ys, legend_lines)];
    let boxes = place_tags(at, &tags, POINT_LABEL_PX, 8, plot, &legend);
    draw_tags(root, at, &tags, &boxes, color)?;
    Ok(boxes)
}

/// The key table's rows: each point's number (saying so when its tag was crowded out of the
/// plot, see [`tag_points`]) before its `cells`.
fn key_rows(
    boxes: &[Option<Rect>],
    cells: impl IntoIterator<Item = Vec<String>>,
) -> Vec<Vec<String>> {
    boxes
        .iter()
        .zip(cells)
        .enumerate()
        .map(|(i, (b, cells))| {
            let number = if b.is_some() {
                (i + 1).to_string()
            } else {
                format!("{} (untagged: crowded)", i + 1)
            };
            std::iter::once(number).chain(cells).collect()
        })
        .collect()
}

/// An axis with its ticks chosen here (powers of two, 1-2-5 steps on log axes) rather than
/// by plotters, which finds none on a log axis spanning less than a decade: the axis, and its
/// ticks.
struct TickedAxis<R>(R, Vec<f64>);

impl<R: Ranged<ValueType = f64>> Ranged for TickedAxis<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.0.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.1.clone()
    }

    fn range(&self) -> Range<f64> {
        self.0.range()
    }
}

fn legend_line(color: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
}

/// Draws `points` joined by a line `width_px` wide in `color`, named `name` in the legend.
fn draw_line<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    points: impl IntoIterator<Item = (f64, f64)>,
    name: impl Into<String>,
    color: RGBColor,
    width_px: u32,
) -> DrawResult<DB>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(width_px)))?
        .label(name)
        .legend(legend_line(color));
    Ok(())
}

/// A point's value written beside it: the text, where the text is anchored, and its offset
/// in pixels from the point.
struct Figure {
    text: String,
    pos: Pos,
    offset: (i32, i32),
}

/// A figure centred 10 px below its point when `below`, else 10 px above it.
fn figure_below_or_above(text: String, below: bool) -> Figure {
    let (v_pos, dy) = if below {
        (VPos::Top, 10)
    } else {
        (VPos::Bottom, -10)
    };
    Figure {
        text,
        pos: Pos::new(HPos::Center, v_pos),
        offset: (0, dy),
    }
}

/// [`draw_line`] 3 px wide, then a dot on each point with `figure` of its value beside it, so
/// that the values can be read off exactly.
fn draw_figured_line<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    points: &[(f64, f64)],
    name: &str,
    color: RGBColor,
    figure: impl Fn(f64) -> Figure,
) -> DrawResult<DB>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    draw_line(chart, points.iter().copied(), name, color, 3)?;
    chart.draw_series(points.iter().map(|&(x, y)| {
        let Figure {
            text: figure_text,
            pos,
            offset,
        } = figure(y);
        let style = text(POINT_LABEL_PX).color(&color).pos(pos);
        EmptyElement::at((x, y))
            + Circle::new((0, 0), 5, color.filled())
            + Text::new(figure_text, offset, style)
    }))?;
    Ok(())
}

/// The x axis two stacked panels share (the batch and speculative sweeps): its range, ticks,
/// description and tick labels.
struct SharedX {
    range: Range<f64>,
    ticks: Vec<f64>,
    desc: &'static str,
    label: fn(&f64) -> String,
}

type PanelChart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<TickedAxis<RangedCoordf64>, RangedCoordf64>>;

/// One of two stacked panels on `area`: its caption, the shared x axis, `y_range` described
/// by `y_desc` with 8 labels, and the grid drawn.
fn panel<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x: &SharedX,
    y_range: Range<f64>,
    y_desc: &str,
) -> Result<PanelChart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, text(CAPTION_PX))
        .margin(12)
        .margin_right(30)
        .x_label_area_size(55)
        .y_label_area_size(85)
        .build_cartesian_2d(
            TickedAxis(RangedCoordf64::from(x.range.clone()), x.ticks.clone()),
            y_range,
        )?;
    mesh(&mut chart, x.desc, y_desc)
        .x_label_formatter(&x.label)
        .y_labels(8)
        .draw()?;
    Ok(chart)
}

// ---------------------------------------------------------------------------------------------
// Batch sweep

struct BatchSweepChart {
    /// (log2 B, value) per series, finite values only.
    aggregate: Vec<(f64, f64)>,
    per_sequence: Vec<(f64, f64)>,
    p50: Vec<(f64, f64)>,
    p99: Vec<(f64, f64)>,
}

impl BatchSweepChart {
    fn new(points: &[BatchPoint]) -> Option<Self> {
        let mut sorted: Vec<&BatchPoint> = points.iter().filter(|p| p.batch > 0).collect();
        sorted.sort_by_key(|p| p.batch);
        let series = |value: fn(&BatchPoint) -> Option<f64>| -> Vec<(f64, f64)> {
            sorted
                .iter()
                .filter_map(|p| Some((f64::from(p.batch).log2(), value(p)?)))
                .filter(|(_, v)| v.is_finite() && *v >= 0.0)
                .collect()
        };
        let chart = Self {
            aggregate: series(|p| p.aggregate_tok_per_s),
            per_sequence: series(|p| p.per_sequence_tok_per_s),
            p50: series(|p| p.itl_p50_ms),
            p99: series(|p| p.itl_p99_ms),
        };
        chart.all().iter().any(|s| !s.is_empty()).then_some(chart)
    }

    fn all(&self) -> [&Vec<(f64, f64)>; 4] {
        [&self.aggregate, &self.per_sequence, &self.p50, &self.p99]
    }

    /// The x range in log2 B, padded half a step on each side, and its ticks at the powers
    /// of two inside it.
    fn x_axis(&self) -> (Range<f64>, Vec<f64>) {
        let xs = || self.all().into_iter().flatten().map(|(x, _)| *x);
        let lo = xs().fold(f64::INFINITY, f64::min);
        let hi = xs().fold(f64::NEG_INFINITY, f64::max);
        let ticks = (lo.floor() as i32..=hi.ceil() as i32)
            .map(f64::from)
            .filter(|t| *t >= lo - 1e-9 && *t <= hi + 1e-9)
            .collect();
        (lo - 0.5..hi + 0.5, ticks)
    }
}

/// 0 up to the largest value plus headroom for the legend; never an empty range.
fn value_range(series: &[&Vec<(f64, f64)>], headroom: f64) -> Range<f64> {
    let max = series
        .iter()
        .flat_map(|s| s.iter().map(|(_, v)| *v))
        .fold(0.0, f64::max);
    let top = if max > 0.0 { max * headroom } else { 1.0 };
    0.0..top
}

fn format_batch(log2_b: f64) -> String {
    format!("{}", 2f64.powf(log2_b).round())
}

impl Chart for BatchSweepChart {
    fn draw<DB: DrawingBackend>(
        &self,
        _root: &DrawingArea<DB, Shift>,
        body: DrawingArea<DB, Shift>,
    ) -> DrawResult<DB> {
        let (top, bottom) = body.split_vertically(body.dim_in_pixel().1 / 2);
        let (range, ticks) = self.x_axis();
        let axis = SharedX {
            range,
            ticks,
            desc: "batch size B (sequences decoded together, log₂ scale)",
            label: |x| format_batch(*x),
        };

        let panels = [
            (
                &top,
                "Throughput",
                "tokens per second (tok/s)",
                [
                    // The larger series of each pair gets its values above its points, the
                    // other below, so that the two sets of figures do not overprint.
                    (
                        &self.aggregate,
                        "aggregate (all sequences)",
                        AGGREGATE_COLOR,
                        false,
                    ),
                    (&self.per_sequence, "per sequence", PER_SEQUENCE_COLOR, true),
                ],
            ),
            (
                &bottom,
                "Inter-token latency",
                "inter-token latency (ms)",
                [
                    (&self.p50, "ITL p50", P50_COLOR, true),
                    (&self.p99, "ITL p99", P99_COLOR, false),
                ],
            ),
        ];
        for (area, caption, y_desc, series) in panels {
            let y_range = value_range(&[series[0].0, series[1].0], 1.3);
            let y_top = y_range.end;
            let mut chart = panel(area, caption, &axis, y_range, y_desc)?;
            for (points, name, color, below) in series {
                if points.is_empty() {
                    continue;
                }
                // A value meant to go below its point goes above it when the point sits near
                // the x axis, where the tick labels are.
                draw_figured_line(&mut chart, points, name, color, |y| {
                    figure_below_or_above(trim_number(y), below && y > 0.12 * y_top)
                })?;
            }
            draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Depth sweep

struct DepthSweepChart {
    /// (depth, value) per series, in depth order.
    measured: Vec<(f64, f64)>,
    predicted: Vec<(f64, f64)>,
    ceiling: Vec<(f64, f64)>,
    /// Bytes per token in MB: all, and the KV cache's part.
    bytes_mb: Vec<(f64, f64)>,
    kv_mb: Vec<(f64, f64)>,
}

impl DepthSweepChart {
    fn new(points: &[DepthPoint]) -> Option<Self> {
        let usable = |v: f64| v.is_finite() && v > 0.0;
        let kept: Vec<DepthPoint> = points
            .iter()
            .filter(|p| usable(p.tok_per_s) && usable(p.bytes_per_token))
            .copied()
            .collect();
        let slowdown = crate::metrics::roofline::depth_slowdown(&kept);
        let base = slowdown.iter().find(|(p, _, _)| p.depth == 0);
        let base_rate = base.map(|(p, _, _)| p.tok_per_s);
        let x = |p: &DepthPoint| p.depth as f64;
        let chart = Self {
            measured: slowdown
                .iter()
                .map(|(p, _, _)| (x(p), p.tok_per_s))
                .collect(),
            predicted: slowdown
                .iter()
                .filter_map(|(p, _, predicted)| Some((x(p), base_rate? * (*predicted)?)))
                .collect(),
            ceiling: slowdown
                .iter()
                .filter_map(|(p, _, _)| Some((x(p), p.ceiling_tok_per_s.filter(|c| usable(*c))?)))
                .collect(),
            bytes_mb: slowdown
                .iter()
                .map(|(p, _, _)| (x(p), p.bytes_per_token / 1e6))
                .collect(),
            kv_mb: slowdown
                .iter()
                .map(|(p, _, _)| (x(p), p.kv_bytes_per_token.max(0.0) / 1e6))
                .collect(),
        };
        (!chart.measured.is_empty()).then_some(chart)
    }

    /// The depths as ticks, and a range padded by 6% of the span on each side.
    fn x_axis(&self) -> (Range<f64>, Vec<f64>) {
        let ticks: Vec<f64> = self.measured.iter().map(|(x, _)| *x).collect();
        let lo = ticks.first().copied().unwrap_or(0.0);
        let hi = ticks.last().copied().unwrap_or(0.0);
        let pad = ((hi - lo) * 0.06).max(1.0);
        (lo - pad..hi + pad, ticks)
    }
}

impl Chart for DepthSweepChart {
    fn draw<DB: DrawingBackend>(
        &self,
        _root: &DrawingArea<DB, Shift>,
        body: DrawingArea<DB, Shift>,
    ) -> DrawResult<DB> {
        let (top, bottom) = body.split_vertically(body.dim_in_pixel().1 / 2);
        let (range, ticks) = self.x_axis();
        let axis = SharedX {
            range,
            ticks,
            desc: "depth: tokens in the KV cache before the test",
            label: |x| format!("{}", x.round()),
        };
        // The prediction is drawn without figures: it starts on the measured point at
        // depth 0 and may run close to the measured line, whose figures would then overprint.
        let speed = [
            (
                &self.ceiling,
                "ceiling: bandwidth ÷ bytes per token",
                CEILING_COLOR,
                Some(false),
            ),
            (
                &self.measured,
                "measured decode tok/s",
                MEASURED_COLOR,
                Some(false),
            ),
            (
                &self.predicted,
                "what the bytes predict (depth 0's MBU)",
                PER_SEQUENCE_COLOR,
                None,
            ),
        ];
        let bytes = [
            (
                &self.bytes_mb,
                "bytes per token: weights + KV",
                AGGREGATE_COLOR,
                Some(false),
            ),
            (&self.kv_mb, "of which the KV cache", P99_COLOR, Some(true)),
        ];
        let panels: [(&DrawingArea<DB, Shift>, &str, &str, &[_]); 2] = [
            (
                &top,
                "Decode speed against depth",
                "tokens per second (tok/s)",
                &speed,
            ),
            (
                &bottom,
                "Bytes read per token against depth",
                "MB per token",
                &bytes,
            ),
        ];
        for (area, caption, y_desc, series) in panels {
            let all: Vec<&Vec<(f64, f64)>> = series.iter().map(|s| s.0).collect();
            let y_range = value_range(&all, 1.35);
            let y_top = y_range.end;
            let mut chart = panel(area, caption, &axis, y_range, y_desc)?;
            for &(points, name, color, figures) in series {
                if points.is_empty() {
                    continue;
                }
                let Some(below) = figures else {
                    draw_line(&mut chart, points.iter().copied(), name, color, 2)?;
                    chart.draw_series(
                        points
                            .iter()
                            .map(|&(x, y)| Circle::new((x, y), 6, color.stroke_width(2))),
                    )?;
                    continue;
                };
                draw_figured_line(&mut chart, points, name, color, |y| {
                    figure_below_or_above(trim_number(y), below && y > 0.12 * y_top)
                })?;
            }
            draw_legend(&mut chart, SeriesLabelPosition::UpperMiddle)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Roofline

struct RooflineChart {
    /// (bytes per token, tok/s, label), sorted by bytes.
    points: Vec<(f64, f64, String)>,
    /// Bytes per second, when it is a usable number.
    bandwidth: Option<f64>,
    bandwidth_label: String,
}

impl RooflineChart {
    fn new(points: &[RooflinePoint], bandwidth_bytes_per_s: f64, label: &str) -> Option<Self> {
        let usable = |v: f64| v.is_finite() && v > 0.0;
        let mut kept: Vec<(f64, f64, String)> = points
            .iter()
            .filter(|p| usable(p.bytes_per_token) && usable(p.tok_per_s))
            .map(|p| (p.bytes_per_token, p.tok_per_s, p.label.clone()))
            .collect();
        if kept.is_empty() {
            return None;
        }
        kept.sort_by(|a, b| a.0.total_cmp(&b.0));
        Some(Self {
            points: kept,
            bandwidth: usable(bandwidth_bytes_per_s).then_some(bandwidth_bytes_per_s),
            bandwidth_label: label.to_string(),
        })
    }

    /// Log ranges that hold every point and the ceiling over the x range, with room for the
    /// labels: x a factor 2.5 wider each side, y a factor 2 below and 4 above.
    fn ranges(&self) -> (Range<f64>, Range<f64>) {
        let span = |v: fn(&(f64, f64, String)) -> f64| {
            let values = || self.points.iter().map(v);
            let lo = values().fold(f64::INFINITY, f64::min);
            (lo, values().fold(0.0, f64::max))
        };
        let ((x_lo, x_hi), (mut y_lo, mut y_hi)) = (span(|p| p.0), span(|p| p.1));
        let (x_lo, x_hi) = (x_lo / 2.5, x_hi * 2.5);
        if let Some(bw) = self.bandwidth {
            // The ceiling over the points' own span, not the padded one, so that a far-away
            // ceiling does not squash the points.
            let span_lo = x_lo * 2.5;
            let span_hi = x_hi / 2.5;
            y_hi = y_hi.max(bw / span_lo);
            y_lo = y_lo.min(bw / span_hi);
        }
        (x_lo..x_hi, y_lo / 2.0..y_hi * 4.0)
    }
}

/// Ticks at 1, 2 and 5 times the powers of ten inside `range` (positive); at every integer
/// multiple when that gives fewer than four; the ends and the middle when even that fails.
fn log_ticks(range: &Range<f64>) -> Vec<f64> {
    let (lo, hi) = (range.start, range.end);
    let at_multiples = |multiples: &[f64]| {
        let mut ticks = Vec::new();
        let mut decade = 10f64.powf(lo.log10().floor());
        while decade <= hi && ticks.len() < 64 {
            for m in multiples {
                let t = decade * m;
                if t >= lo && t <= hi {
                    ticks.push(t);
                }
            }
            decade *= 10.0;
        }
        ticks
    };
    let ticks = at_multiples(&[1.0, 2.0, 5.0]);
    if ticks.len() >= 4 {
        return ticks;
    }
    let ticks = at_multiples(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    if ticks.len() >= 2 {
        return ticks;
    }
    vec![lo, (lo * hi).sqrt(), hi]
}

/// Bytes in decimal units (as bandwidths are quoted): "512 kB", "1.5 GB".
fn format_bytes(bytes: f64) -> String {
    let units = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    for (scale, unit) in units {
        if bytes >= scale {
            return format!("{} {unit}", trim_number(bytes / scale));
        }
    }
    format!("{} B", trim_number(bytes))
}

/// A chart's number: three significant digits, trailing zeros dropped (`crate::fmt::sig`).
fn trim_number(v: f64) -> String {
    crate::fmt::sig(v, 3)
}

fn format_bandwidth(bytes_per_s: f64) -> String {
    format!("{}/s", format_bytes(bytes_per_s))
}

impl Chart for RooflineChart {
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        body: DrawingArea<DB, Shift>,
    ) -> DrawResult<DB> {
        let (body, key_area) = split_key(body, self.points.len());
        let (x_range, y_range) = self.ranges();
        let log_axis =
            |r: &Range<f64>| TickedAxis(LogCoord::from(r.clone().log_scale()), log_ticks(r));
        let caption = match self.bandwidth {
            Some(bw) => format!(
                "Decode roofline: ceiling = {} ({}) ÷ bytes per token",
                format_bandwidth(bw),
                self.bandwidth_label
            ),
            None => "Decode speed (no bandwidth figure: ceiling not drawn)".to_string(),
        };
        let mut chart = ChartBuilder::on(&body)
            .caption(caption, text(CAPTION_PX))
            .margin(15)
            .margin_right(40)
            .x_label_area_size(60)
            .y_label_area_size(90)
            .build_cartesian_2d(log_axis(&x_range), log_axis(&y_range))?;
        mesh(
            &mut chart,
            "bytes read per token: weights + KV cache (log scale)",
            "decode speed (tok/s, log scale)",
        )
        .x_label_formatter(&|x| format_bytes(*x))
        .draw()?;

        let ceiling = self.bandwidth.map(|bw| {
            let name = format!(
                "ceiling: tok/s = {} ÷ bytes per token",
                format_bandwidth(bw)
            );
            (bw, name)
        });
        if let Some((bw, name)) = &ceiling {
            // On log-log axes the ceiling is a straight line of slope −1: its two ends draw it.
            let line = [x_range.start, x_range.end].map(|x| (x, bw / x));
            draw_line(&mut chart, line, name.clone(), CEILING_COLOR, 3)?;
        }

        chart
            .draw_series(
                self.points
                    .iter()
                    .map(|&(x, y, _)| Circle::new((x, y), 7, MEASURED_COLOR.filled())),
            )?
            .label("measured decode speed")
            .legend(|(x, y)| Circle::new((x + 12, y), 6, MEASURED_COLOR.filled()));
        // Each point gets its number beside it, placed where it overlaps no other point, tag or
        // the legend, inside the plot; the key table under the plot gives each number's name
        // and figures, so that no label can print over another however dense the points.
        let at: Vec<(i32, i32)> = self
            .points
            .iter()
            .map(|(x, y, _)| chart.backend_coord(&(*x, *y)))
            .collect();
        let mut legend_lines = vec!["measured decode speed".to_string()];
        legend_lines.extend(ceiling.map(|(_, name)| name));
        let plot = chart.plotting_area().get_pixel_range();
        let boxes = tag_points(root, &at, &plot, &legend_lines, MEASURED_COLOR)?;
        let cells = self.points.iter().map(|(x, y, label)| {
            let share = self
                .bandwidth
                .map(|bw| format!("{}%", trim_number(100.0 * y / (bw / x))))
                .unwrap_or_else(|| "—".to_string());
            vec![
                crate::text::ellipsis(label, 60),
                trim_number(*y),
                share,
                format_bytes(*x),
            ]
        });
        let rows = key_rows(&boxes, cells);
        draw_key(
            &key_area,
            &[
                ("#", 60),
                ("test", 230),
                ("decode tok/s", 760),
                ("of ceiling", 900),
                ("bytes/token", 1030),
            ],
            &rows,
        )?;
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
    }
}

/// One candidate of a comparison: its speed and its distance from the reference.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QualityPoint {
    pub label: String,
    /// Mean KL divergence from the reference, nats (0 for the reference).
    pub kld_mean: f64,
    pub tok_per_s: f64,
    /// The rounds' standard deviation of `tok_per_s`, drawn as an error bar (none for one
    /// round).
    pub tok_per_s_sd: Option<f64>,
    /// On the Pareto front.
    pub pareto: bool,
}

/// Where a KL divergence sits on the chart's log axis: log10 of it, with 0 (the reference) and
/// anything below `floor` drawn at `floor`, a third of the smallest positive value (so 0.006
/// and 0 are told apart, and 0.0001 from 0.001).
fn kld_axis_floor(points: &[QualityPoint]) -> f64 {
    points
        .iter()
        .map(|p| p.kld_mean)
        .filter(|k| *k > 0.0)
        .fold(f64::INFINITY, f64::min)
        .min(1e-2)
        / 3.0
}

/// Decode speed against mean KL divergence, one labelled point per candidate, the Pareto
/// front joined by a line (filled points) and the dominated candidates hollow.
pub(crate) fn plot_speed_vs_quality(
    points: &[QualityPoint],
    title: &str,
    subtitle: &str,
    out: impl Into<crate::fsx::Output>,
) -> Result<(), PlotError> {
    let out = out.into();
    let kind = plot_file_kind(&out.path)?;
    let kept = kept(points, "speed against quality", |p| {
        p.kld_mean.is_finite() && p.kld_mean >= 0.0 && p.tok_per_s.is_finite() && p.tok_per_s > 0.0
    })?;
    let height = 800 + key_height(kept.len());
    let chart = QualityChart { points: kept };
    render(&chart, (title, subtitle), kind, &out, (1200, height))
}

struct QualityChart {
    points: Vec<QualityPoint>,
}

const FRONT_COLOR: RGBColor = RGBColor(44, 160, 44);
const DOMINATED_COLOR: RGBColor = RGBColor(214, 39, 40);

/// Where a KL divergence sits on the quality chart's log axis: log10 of it, with anything
/// below `floor` (0, the reference) at `floor`.
fn kld_x(kld: f64, floor: f64) -> f64 {
    kld.max(floor).log10()
}

impl QualityChart {
    /// The x range (log10 KL divergence from `floor`, padded) and the y range (tok/s, with room
    /// above the highest error bar).
    fn ranges(&self, floor: f64) -> (Range<f64>, Range<f64>) {
        let x_lo = floor.log10();
        let x_hi = self
            .points
            .iter()
            .map(|p| kld_x(p.kld_mean, floor))
            .fold(x_lo, f64::max)
            .max(x_lo + 1.0);
        let pad = (x_hi - x_lo) * 0.08;
        let y_max = self
            .points
            .iter()
            .map(|p| p.tok_per_s + p.tok_per_s_sd.unwrap_or(0.0))
            .fold(0.0, f64::max)
            * 1.2;
        (x_lo - pad..x_hi + pad, 0.0..y_max)
    }

    /// The Pareto front's line and filled points, the dominated candidates hollow, and each
    /// candidate's ± sd bar.
    fn draw_candidates<'a, DB: DrawingBackend + 'a>(
        &self,
        chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
        floor: f64,
    ) -> DrawResult<DB> {
        let x_of = |k: f64| kld_x(k, floor);
        let mut front: Vec<(f64, f64)> = self
            .points
            .iter()
            .filter(|p| p.pareto)
            .map(|p| (x_of(p.kld_mean), p.tok_per_s))
            .collect();
        front.sort_by(|a, b| a.0.total_cmp(&b.0));
        draw_line(chart, front, "Pareto front", FRONT_COLOR, 2)?;
        chart
            .draw_series(self.points.iter().filter(|p| !p.pareto).map(|p| {
                Circle::new(
                    (x_of(p.kld_mean), p.tok_per_s),
                    7,
                    DOMINATED_COLOR.stroke_width(2),
                )
            }))?
            .label("dominated")
            .legend(|(x, y)| Circle::new((x + 12, y), 6, DOMINATED_COLOR.stroke_width(2)));
        chart.draw_series(
            self.points
                .iter()
                .filter(|p| p.pareto)
                .map(|p| Circle::new((x_of(p.kld_mean), p.tok_per_s), 7, FRONT_COLOR.filled())),
        )?;
        // The rounds' spread: a speed difference inside the bars is not one.
        chart.draw_series(self.points.iter().filter_map(|p| {
            let sd = p.tok_per_s_sd.filter(|sd| sd.is_finite() && *sd > 0.0)?;
            let x = x_of(p.kld_mean);
            Some(PathElement::new(
                vec![(x, (p.tok_per_s - sd).max(0.0)), (x, p.tok_per_s + sd)],
                BLACK.stroke_width(2),
            ))
        }))?;
        Ok(())
    }
}

impl Chart for QualityChart {
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        body: DrawingArea<DB, Shift>,
    ) -> DrawResult<DB> {
        let (body, key_area) = split_key(body, self.points.len());
        // KL divergences span orders of magnitude (Q8_0 0.001, Q2_K 0.4): a log axis, with 0
        // (the reference) drawn at the floor and labelled 0.
        let floor = kld_axis_floor(&self.points);
        let (x_range, y_range) = self.ranges(floor);
        let mut chart = ChartBuilder::on(&body)
            .caption(
                "Up and to the left is better: faster and closer to the reference",
                text(CAPTION_PX),
            )
            .margin(15)
            .margin_right(40)
            .x_label_area_size(60)
            .y_label_area_size(90)
            .build_cartesian_2d(x_range, y_range)?;
        let zero_at = floor.log10();
        mesh(
            &mut chart,
            format!(
                "mean KL divergence from the reference (nats, log scale; 0 is drawn at {})",
                crate::fmt::sig(floor, 2)
            ),
            "decode speed (tok/s), bars: ± sd of the rounds",
        )
        .x_label_formatter(&|x| {
            if (*x - zero_at).abs() < 1e-9 {
                "0".to_string()
            } else {
                crate::fmt::sig(10f64.powf(*x), 2)
            }
        })
        .draw()?;
        self.draw_candidates(&mut chart, floor)?;
        // Numbers beside the points, placed clear of every point, tag and the legend; the
        // key table under the plot names them.
        let at: Vec<(i32, i32)> = self
            .points
            .iter()
            .map(|p| chart.backend_coord(&(kld_x(p.kld_mean, floor), p.tok_per_s)))
            .collect();
        let plot = chart.plotting_area().get_pixel_range();
        let legend = ["Pareto front".to_string(), "dominated".to_string()];
        let boxes = tag_points(root, &at, &plot, &legend, BLACK)?;
        let cells = self.points.iter().map(|p| {
            vec![
                crate::text::ellipsis(&p.label, 60),
                match p.tok_per_s_sd {
                    Some(sd) => format!("{} ± {}", trim_number(p.tok_per_s), trim_number(sd)),
                    None => trim_number(p.tok_per_s),
                },
                crate::fmt::sig(p.kld_mean, 3),
                if p.pareto { "front" } else { "dominated" }.to_string(),
            ]
        });
        let rows = key_rows(&boxes, cells);
        draw_key(
            &key_area,
            &[
                ("#", 60),
                ("candidate", 230),
                ("tg tok/s", 760),
                ("KL mean", 900),
                ("Pareto", 1030),
            ],
            &rows,
        )?;
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
    }
}

// ---------------------------------------------------------------------------------------------
// Speculative decoding sweep

/// One k of a speculative decoding sweep (`bench --spec/--draft --draft-max …`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpecPoint {
    /// Most tokens drafted per step (0 = plain decoding).
    pub k: u32,
    /// Measured speed-up against k = 0: mean, least and greatest over the rounds.
    pub speedup: f64,
    pub speedup_min: f64,
    pub speedup_max: f64,
    /// The roofline's expected speed-up (bytes only).
    pub expected: Option<f64>,
    /// The roofline with its compute term (`metrics::spec`), when ρ was measured.
    pub expected_compute: Option<f64>,
    /// accepted / drafted and α, as fractions.
    pub acceptance: Option<f64>,
    pub alpha: Option<f64>,
}

/// Speed-up (measured, with its range over the rounds, and the roofline's expectation, the
/// break-even line at 1) and acceptance against k: two panels sharing the x axis.
pub(crate) fn plot_spec_sweep(
    points: &[SpecPoint],
    title: &str,
    subtitle: &str,
    out: impl Into<crate::fsx::Output>,
) -> Result<(), PlotError> {
    let out = out.into();
    let kind = plot_file_kind(&out.path)?;
    let mut kept = kept(points, "speculative decoding sweep", |p| {
        p.speedup.is_finite() && p.speedup >= 0.0
    })?;
    kept.sort_by_key(|p| p.k);
    let chart = SpecSweepChart { points: kept };
    render(&chart, (title, subtitle), kind, &out, (1200, 900))
}

struct SpecSweepChart {
    points: Vec<SpecPoint>,
}

/// The speculative sweep's x axis.
const K_DESC: &str = "k: most tokens drafted per step (0 = no speculation)";
const EXPECTED_COLOR: RGBColor = RGBColor(255, 127, 14);
/// The roofline with its compute term.
const EXPECTED_COMPUTE_COLOR: RGBColor = RGBColor(148, 103, 189);

/// `v` when it is a finite, non-negative number.
fn finite_non_negative(v: Option<f64>) -> Option<f64> {
    v.filter(|v| v.is_finite() && *v >= 0.0)
}

fn format_k(k: &f64) -> String {
    format!("{}", k.round())
}

impl SpecSweepChart {
    /// (k, value) for each point that has a `value`.
    fn series(&self, value: impl Fn(&SpecPoint) -> Option<f64>) -> Vec<(f64, f64)> {
        self.points
            .iter()
            .filter_map(|p| Some((f64::from(p.k), value(p)?)))
            .collect()
    }

    /// The top panel: the measured speed-up with its range over the rounds, the roofline's
    /// expectations and the break-even line.
    fn draw_speedup<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        axis: &SharedX,
    ) -> DrawResult<DB> {
        let measured = self.series(|p| Some(p.speedup));
        let expected = self.series(|p| finite_non_negative(p.expected));
        let expected_compute = self.series(|p| finite_non_negative(p.expected_compute));
        let top_max = self
            .points
            .iter()
            .map(|p| p.speedup_max.max(p.speedup))
            .chain(expected.iter().chain(&expected_compute).map(|(_, v)| *v))
            .fold(1.0, f64::max)
            * 1.7;
        let mut chart = panel(
            area,
            "Speed-up against k = 0 (above 1: speculation pays)",
            axis,
            0.0..top_max,
            "speed-up (×)",
        )?;
        let break_even = [(axis.range.start, 1.0), (axis.range.end, 1.0)];
        draw_line(&mut chart, break_even, "break-even (1×)", CEILING_COLOR, 1)?;
        for (series, color, label) in [
            (&expected, EXPECTED_COLOR, "roofline expected"),
            (
                &expected_compute,
                EXPECTED_COMPUTE_COLOR,
                "roofline with its compute term",
            ),
        ] {
            if series.is_empty() {
                continue;
            }
            draw_line(&mut chart, series.iter().copied(), label, color, 2)?;
            chart.draw_series(
                series
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
            )?;
        }
        chart.draw_series(self.points.iter().map(|p| {
            let x = f64::from(p.k);
            PathElement::new(
                vec![(x, p.speedup_min), (x, p.speedup_max)],
                MEASURED_COLOR.stroke_width(2),
            )
        }))?;
        let name = "measured (bar: range over rounds)";
        draw_figured_line(&mut chart, &measured, name, MEASURED_COLOR, |y| {
            // Below and right of the point: clear of the line through it and of break-even.
            Figure {
                text: format!("{y:.2}×"),
                pos: Pos::new(HPos::Left, VPos::Top),
                offset: (8, 8),
            }
        })?;
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
    }

    /// The bottom panel: accepted / drafted and α against k, in percent.
    fn draw_acceptance<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        axis: &SharedX,
    ) -> DrawResult<DB> {
        let percent = |v: Option<f64>| finite_non_negative(v).map(|v| v * 100.0);
        let acceptance = self.series(|p| percent(p.acceptance));
        let alpha = self.series(|p| percent(p.alpha));
        let mut chart = panel(area, "Acceptance", axis, 0.0..150.0, "accepted (%)")?;
        // α ≥ accepted / drafted (a rejection ends a draft, so at least one drafted token per
        // rejection is not accepted): α's figures go above its points, the others' below.
        for (series, name, color, below) in [
            (&acceptance, "accepted / drafted", P50_COLOR, true),
            (&alpha, "α (per drafted token)", P99_COLOR, false),
        ] {
            if series.is_empty() {
                continue;
            }
            // Near the x axis, where the tick labels are, every figure goes above.
            draw_figured_line(&mut chart, series, name, color, |y| {
                figure_below_or_above(format!("{y:.0}%"), below && y > 18.0)
            })?;
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
    }
}

impl Chart for SpecSweepChart {
    fn draw<DB: DrawingBackend>(
        &self,
        _root: &DrawingArea<DB, Shift>,
        body: DrawingArea<DB, Shift>,
    ) -> DrawResult<DB> {
        let (top, bottom) = body.split_vertically(body.dim_in_pixel().1 / 2);
        let ks: Vec<f64> = self.points.iter().map(|p| f64::from(p.k)).collect();
        let lo = ks.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ks.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pad = ((hi - lo) * 0.08).max(0.5);
        let axis = SharedX {
            range: lo - pad..hi + pad,
            ticks: ks,
            desc: K_DESC,
            label: format_k,
        };
        self.draw_speedup(&top, &axis)?;
        self.draw_acceptance(&bottom, &axis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `TOKSCOPE_KEEP_CHARTS=DIR`, the charts the tests draw are copied there, to be
    /// looked at as images.
    fn keep(path: &Path) {
        if let Some(dir) = std::env::var_os("TOKSCOPE_KEEP_CHARTS") {
            let dir = PathBuf::from(dir);
            let _ = std::fs::create_dir_all(&dir);
            if let Some(name) = path.file_name() {
                let _ = std::fs::copy(path, dir.join(name));
            }
        }
    }

    #[test]
    fn spec_sweep_draws_png_and_svg_and_refuses_no_points() {
        let dir = tempfile::tempdir().unwrap();
        let points: Vec<SpecPoint> = [
            (0, 1.0, None, None),
            (2, 0.8, Some(1.6), Some(0.6)),
            (8, 0.6, Some(2.5), Some(0.4)),
        ]
        .into_iter()
        .map(|(k, s, e, a)| SpecPoint {
            k,
            speedup: s,
            speedup_min: s * 0.9,
            speedup_max: s * 1.1,
            expected: e,
            expected_compute: e.map(|e| e * 0.5),
            acceptance: a,
            alpha: a.map(|a| a + 0.1),
        })
        .collect();
        for name in ["spec.png", "spec.svg"] {
            let path = dir.path().join(name);
            plot_spec_sweep(&points, "speculative decoding", "test", &path).unwrap();
            assert!(std::fs::metadata(&path).unwrap().len() > 1000, "{name}");
            keep(&path);
        }
        let svg = std::fs::read_to_string(dir.path().join("spec.svg")).unwrap();
        assert!(
            svg.contains("roofline expected")
                && svg.contains("roofline with its compute term")
                && svg.contains("0.80×"),
            "labels drawn"
        );
        assert!(matches!(
            plot_spec_sweep(&[], "t", "s", &dir.path().join("x.png")),
            Err(PlotError::NoPoints { .. })
        ));
    }

    fn sweep() -> Vec<BatchPoint> {
        [
            (1, 60.0, 60.0, 16.5, 18.0),
            (2, 110.0, 55.0, 18.0, 21.0),
            (4, 190.0, 47.5, 21.0, 26.0),
            (8, 290.0, 36.3, 27.5, 35.0),
            (16, 380.0, 23.8, 42.0, 55.0),
        ]
        .into_iter()
        .map(|(batch, agg, per, p50, p99)| BatchPoint {
            batch,
            aggregate_tok_per_s: Some(agg),
            per_sequence_tok_per_s: Some(per),
            itl_p50_ms: Some(p50),
            itl_p99_ms: Some(p99),
        })
        .collect()
    }

    fn roofline() -> Vec<RooflinePoint> {
        [
            ("gemma-3-270m Q4_K_M", 2.3e8, 95.0),
            ("gemma-3-270m at depth 4096", 2.6e8, 80.0),
            ("llama-3-8b Q4_K_M", 4.7e9, 5.1),
        ]
        .into_iter()
        .map(|(label, bytes, tps)| RooflinePoint {
            label: label.to_string(),
            bytes_per_token: bytes,
            tok_per_s: tps,
        })
        .collect()
    }

    /// Width and height from a PNG's IHDR chunk.
    fn png_size(bytes: &[u8]) -> (u32, u32) {
        let be = |at: usize| {
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        (be(16), be(20))
    }

    const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

    #[test]
    fn file_kind_by_extension() {
        assert_eq!(plot_file_kind(Path::new("a/b.png")).unwrap(), PlotKind::Png);
        assert_eq!(plot_file_kind(Path::new("b.SVG")).unwrap(), PlotKind::Svg);
        let err = plot_file_kind(Path::new("chart.jpg")).unwrap_err();
        assert!(matches!(err, PlotError::UnknownExtension { .. }));
        let message = err.to_string();
        assert!(message.contains("'jpg'"), "{message}");
        assert!(message.contains("png, svg"), "{message}");
        let err = plot_file_kind(Path::new("chart")).unwrap_err();
        assert!(matches!(err, PlotError::NoExtension { .. }));
        assert!(err.to_string().contains("png, svg"));
    }

    #[test]
    fn batch_sweep_png_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("sweep.png");
        plot_batch_sweep(
            &sweep(),
            "Batch sweep: gemma-3-270m Q4_K_M, 2 threads",
            "SmolLM2 135M Q4_K_M · CPU · 2 thread(s) · tg32",
            &png,
        )
        .unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.starts_with(PNG_SIGNATURE));
        assert_eq!(png_size(&bytes), (1200, 900));
        assert!(bytes.len() > 20_000, "{} bytes", bytes.len());

        let svg = dir.path().join("sweep.svg");
        plot_batch_sweep(
            &sweep(),
            "Batch sweep: gemma-3-270m Q4_K_M",
            "context",
            &svg,
        )
        .unwrap();
        keep(&png);
        keep(&svg);
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg"), "{}", &text[..80]);
        for expected in [
            "Batch sweep: gemma-3-270m Q4_K_M",
            "Throughput",
            "Inter-token latency",
            "tokens per second (tok/s)",
            "inter-token latency (ms)",
            "batch size B",
            "aggregate (all sequences)",
            "per sequence",
            "ITL p50",
            "ITL p99",
            "\n16\n",
        ] {
            assert!(text.contains(expected), "missing {expected:?}");
        }
    }

    /// A depth sweep's chart: the measured speeds, the speeds the bytes predict from depth
    /// 0 (50 × 1000 ÷ 1250 = 40 at depth 2048, 50 × 1000 ÷ 2000 = 25 at 8192), the ceiling
    /// and the bytes, the measured values written on their points.
    #[test]
    fn depth_sweep_svg_draws_what_the_bytes_predict() {
        let dir = tempfile::tempdir().unwrap();
        let point = |depth, tok_per_s, mb: f64| DepthPoint {
            depth,
            tok_per_s,
            bytes_per_token: mb * 1e6,
            kv_bytes_per_token: (mb - 1000.0) * 1e6,
            ceiling_tok_per_s: Some(100e9 / (mb * 1e6)),
        };
        let points = [
            point(8192, 20.0, 2000.0),
            point(0, 50.0, 1000.0),
            point(2048, 43.0, 1250.0),
        ];
        let svg = dir.path().join("depth.svg");
        plot_depth_sweep(&points, "Decode against depth", "context", &svg).unwrap();
        keep(&svg);
        let text = std::fs::read_to_string(&svg).unwrap();
        for expected in [
            "Decode speed against depth",
            "Bytes read per token against depth",
            "what the bytes predict",
            "\n43\n",
            "\n2000\n",
            "\n8192\n",
        ] {
            assert!(text.contains(expected), "missing {expected:?}");
        }
        // The prediction's points (drawn without figures), on the measured speeds' scale.
        let chart = DepthSweepChart::new(&points).unwrap();
        assert_eq!(
            chart.predicted,
            vec![(0.0, 50.0), (2048.0, 40.0), (8192.0, 25.0)]
        );
        assert_eq!(
            chart.measured,
            vec![(0.0, 50.0), (2048.0, 43.0), (8192.0, 20.0)]
        );
        let png = dir.path().join("depth.png");
        plot_depth_sweep(&points, "Decode against depth", "context", &png).unwrap();
        assert!(std::fs::read(&png).unwrap().starts_with(PNG_SIGNATURE));
        assert!(matches!(
            plot_depth_sweep(&[], "t", "c", &dir.path().join("none.png")),
            Err(PlotError::NoPoints { .. })
        ));
    }

    #[test]
    fn roofline_png_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("roofline.png");
        plot_roofline(
            &roofline(),
            40e9,
            "measured, copy probe",
            "Roofline",
            "context",
            &png,
        )
        .unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.starts_with(PNG_SIGNATURE));
        // The plot and, under it, the key table: a row per point.
        assert_eq!(png_size(&bytes), (1200, 800 + key_height(roofline().len())));
        assert!(bytes.len() > 20_000, "{} bytes", bytes.len());

        let svg = dir.path().join("roofline.svg");
        plot_roofline(
            &roofline(),
            40e9,
            "measured, copy probe",
            "Roofline: 2-core CPU",
            "SmolLM2 135M Q4_K_M · CPU · 2 thread(s) · tg32",
            &svg,
        )
        .unwrap();
        keep(&png);
        keep(&svg);
        let text = std::fs::read_to_string(&svg).unwrap();
        for expected in [
            "Roofline: 2-core CPU",
            "40 GB/s (measured, copy probe)",
            "bytes read per token",
            "decode speed (tok/s, log scale)",
            "measured decode speed",
            // The key table: each numbered point's name and figures.
            "\ngemma-3-270m Q4_K_M\n",
            "\n95\n",
            "\n59.9%\n",
            "\n4.7 GB\n",
            "\nSmolLM2 135M Q4_K_M · CPU · 2 thread(s) · tg32\n",
        ] {
            assert!(text.contains(expected), "missing {expected:?}");
        }
    }

    /// The roofline's subtitle ran off both edges (#59): a long one of wide characters is cut
    /// to what the font measures within the canvas.
    #[test]
    fn a_long_subtitle_is_cut_to_the_canvas() {
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("roofline.svg");
        let subtitle = format!("MODEL {} · CPU · 2 thread(s) · tg32", "WQM0".repeat(60));
        plot_roofline(&roofline(), 40e9, "measured", "Roofline", &subtitle, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        let drawn = text
            .lines()
            .find(|l| l.starts_with("MODEL "))
            .unwrap_or_else(|| panic!("no subtitle drawn"));
        assert!(drawn.ends_with('…'), "{drawn}");
        let mut buf = String::new();
        let area = SVGBackend::with_string(&mut buf, (1200, 900)).into_drawing_area();
        let (w, _) = area
            .estimate_text_size(drawn, &text_style_for_test())
            .unwrap();
        assert!(w <= 1160, "{w} px wide: {drawn}");
    }

    fn text_style_for_test() -> TextStyle<'static> {
        text(SUBTITLE_PX)
    }

    /// A dense sweep (24 points, four on the very same spot, as a depth sweep of near-equal
    /// rows gives): every point is in the key table, the chart grows to hold it, and a point
    /// that cannot be tagged without overprinting says so there (the placement itself is
    /// checked by `tags_never_collide_and_stay_inside`).
    #[test]
    fn a_dense_roofline_keys_every_point() {
        let mut points = Vec::new();
        for (m, base) in [("tiny", 2.3e8), ("small", 2.6e8), ("medium", 1.1e9)] {
            for d in [0u32, 512, 1024, 2048, 4096, 8192, 16384] {
                points.push(RooflinePoint {
                    label: format!("{m}.gguf tg32 @ d{d}"),
                    bytes_per_token: base * (1.0 + f64::from(d) / 65536.0),
                    tok_per_s: 3.5e10 / (base * (1.0 + f64::from(d) / 40000.0)),
                });
            }
        }
        for _ in 0..3 {
            points.push(points[0].clone());
        }
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("dense.png");
        let svg = dir.path().join("dense.svg");
        for path in [&png, &svg] {
            plot_roofline(
                &points,
                40e9,
                "measured",
                "Roofline",
                "tiny.gguf, small.gguf, medium.gguf · CPU · 2 thread(s) · tg32 @ d0…d16384",
                path,
            )
            .unwrap();
            keep(path);
        }
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(png_size(&bytes), (1200, 800 + key_height(points.len())));
        let text = std::fs::read_to_string(&svg).unwrap();
        for i in 1..=points.len() {
            assert!(
                text.contains(&format!("\n{i}\n")) || text.contains(&format!("\n{i} (untagged"))
            );
        }
        assert!(text.contains("\nmedium.gguf tg32 @ d16384\n"));
    }

    #[test]
    fn roofline_without_a_bandwidth_still_draws_the_points() {
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("r.svg");
        plot_roofline(
            &roofline(),
            f64::NAN,
            "unknown",
            "Roofline",
            "context",
            &svg,
        )
        .unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("ceiling not drawn"));
        assert!(!text.contains("% of ceiling"));
    }

    #[test]
    fn empty_and_non_finite_inputs_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("x.png");
        let err = plot_batch_sweep(&[], "t", "context", &png).unwrap_err();
        assert!(
            matches!(
                err,
                PlotError::NoPoints {
                    chart: "batch sweep"
                }
            ),
            "{err}"
        );
        let err = plot_roofline(&[], 1e11, "x", "t", "context", &png).unwrap_err();
        assert!(
            matches!(err, PlotError::NoPoints { chart: "roofline" }),
            "{err}"
        );

        let nan_sweep = [
            BatchPoint {
                batch: 0,
                aggregate_tok_per_s: Some(1.0),
                per_sequence_tok_per_s: Some(1.0),
                itl_p50_ms: Some(1.0),
                itl_p99_ms: Some(1.0),
            },
            BatchPoint {
                batch: 4,
                aggregate_tok_per_s: Some(f64::NAN),
                per_sequence_tok_per_s: Some(f64::INFINITY),
                itl_p50_ms: Some(f64::NEG_INFINITY),
                itl_p99_ms: Some(-1.0),
            },
        ];
        assert!(matches!(
            plot_batch_sweep(&nan_sweep, "t", "context", &png),
            Err(PlotError::NoPoints { .. })
        ));
        let nan_roofline = [RooflinePoint {
            label: "x".into(),
            bytes_per_token: 0.0,
            tok_per_s: f64::NAN,
        }];
        assert!(matches!(
            plot_roofline(&nan_roofline, 1e11, "x", "t", "context", &png),
            Err(PlotError::NoPoints { .. })
        ));
        assert!(
            !png.exists(),
            "no file is written when there is nothing to plot"
        );
    }

    #[test]
    fn partly_bad_inputs_plot_what_is_finite() {
        let dir = tempfile::tempdir().unwrap();
        let mut points = sweep();
        points[1].itl_p99_ms = Some(f64::NAN);
        points[2].aggregate_tok_per_s = Some(f64::INFINITY);
        // A single batch size, and only throughput: still a chart.
        let single = [BatchPoint {
            batch: 1,
            aggregate_tok_per_s: Some(50.0),
            per_sequence_tok_per_s: Some(50.0),
            itl_p50_ms: Some(f64::NAN),
            itl_p99_ms: Some(f64::NAN),
        }];
        for (name, input) in [("a.svg", &points[..]), ("b.png", &single[..])] {
            plot_batch_sweep(input, "t", "context", &dir.path().join(name)).unwrap();
        }
        let one = [RooflinePoint {
            label: "only".into(),
            bytes_per_token: 1e9,
            tok_per_s: 10.0,
        }];
        plot_roofline(
            &one,
            5e10,
            "measured, copy",
            "t",
            "context",
            &dir.path().join("c.png"),
        )
        .unwrap();
    }

    #[test]
    fn unwritable_path_is_an_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["missing/x.png", "missing/x.svg"] {
            let path = dir.path().join(name);
            let err = plot_batch_sweep(&sweep(), "t", "context", &path).unwrap_err();
            assert!(matches!(err, PlotError::Write(_)), "{err}");
            assert!(err.to_string().contains("missing"), "{err}");
        }
    }

    #[test]
    fn tick_helpers() {
        assert_eq!(
            log_ticks(&(1.0..1000.0)),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
        );
        assert_eq!(log_ticks(&(3.0..4.0)), vec![3.0, 4.0]);
        assert_eq!(log_ticks(&(3.1..3.9)).len(), 3);
        assert_eq!(
            log_ticks(&(50.0..280.0)),
            vec![50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0]
        );
        assert_eq!(format_bytes(2.3e8), "230 MB");
        assert_eq!(format_bytes(1.5e9), "1.5 GB");
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_bandwidth(4.8e12), "4.8 TB/s");
        assert_eq!(format_batch(3.0), "8");
        assert_eq!(trim_number(380.0), "380");
        assert_eq!(trim_number(36.25), "36.2");
        assert_eq!(trim_number(60.0), "60");
        assert_eq!(trim_number(0.25), "0.25");
        assert_eq!(trim_number(0.0), "0");
    }

    /// Tags placed for any set of points, coincident ones included: no two tags overlap, no
    /// tag covers a point or an obstacle, every tag stays inside the bounds.
    #[test]
    fn tags_never_collide_and_stay_inside() {
        let bounds = Rect {
            x0: 100,
            y0: 50,
            x1: 1100,
            y1: 700,
        };
        let legend = Rect {
            x0: 800,
            y0: 50,
            x1: 1100,
            y1: 150,
        };
        let mut rng = crate::ids::SplitMix64(7);
        for case in 0..200 {
            let n = 1 + (rng.next_u64() % 40) as usize;
            // Clustered: every point within a small square, some on the very same pixel.
            let spread = [20, 80, 400, 1000][case % 4] as u64;
            let points: Vec<(i32, i32)> = (0..n)
                .map(|i| {
                    if i > 0 && rng.next_u64() % 5 == 0 {
                        return (150, 600);
                    }
                    (
                        150 + (rng.next_u64() % spread) as i32,
                        600 - (rng.next_u64() % spread.min(540)) as i32,
                    )
                })
                .collect();
            let tags: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
            let boxes = place_tags(&points, &tags, 16, 8, bounds, &[legend]);
            let placed: Vec<Rect> = boxes.iter().flatten().copied().collect();
            for (i, a) in placed.iter().enumerate() {
                assert!(a.inside(&bounds), "case {case}: {a:?} outside");
                assert!(!a.overlaps(&legend), "case {case}: {a:?} under the legend");
                for b in &placed[i + 1..] {
                    assert!(!a.overlaps(b), "case {case}: {a:?} overlaps {b:?}");
                }
                for &(x, y) in &points {
                    let marker = Rect {
                        x0: x - 8,
                        y0: y - 8,
                        x1: x + 9,
                        y1: y + 9,
                    };
                    assert!(!a.overlaps(&marker), "case {case}: {a:?} covers ({x}, {y})");
                }
            }
            // Spread-out points all get their tag.
            if spread == 1000 && n <= 10 {
                let distinct: std::collections::BTreeSet<_> = points.iter().collect();
                if distinct.len() == n {
                    assert!(boxes.iter().all(Option::is_some), "case {case}: {points:?}");
                }
            }
        }
    }

    #[test]
    fn speed_against_quality_writes_png_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let points = [
            ("f16", 0.0, 50.0, true),
            ("q8_0", 0.001, 90.0, true),
            ("q4_0", 0.05, 140.0, true),
            ("q3", 0.08, 120.0, false),
        ]
        .map(|(l, k, t, p)| QualityPoint {
            label: l.into(),
            kld_mean: k,
            tok_per_s: t,
            tok_per_s_sd: Some(t / 50.0),
            pareto: p,
        });
        for ext in ["png", "svg"] {
            let path = dir.path().join(format!("q.{ext}"));
            plot_speed_vs_quality(&points, "t", "context", &path).unwrap();
            keep(&path);
            assert!(std::fs::metadata(&path).unwrap().len() > 1000);
        }
        let svg = std::fs::read_to_string(dir.path().join("q.svg")).unwrap();
        // The key names each numbered point with its figures; the subtitle is drawn.
        for text in [
            "\nq4_0\n",
            "\n140 ± 2.8\n",
            "\n0.05\n",
            "\ndominated\n",
            "\ncontext\n",
        ] {
            assert!(svg.contains(text), "{text} is not drawn");
        }
        assert!(matches!(
            plot_speed_vs_quality(&[], "t", "context", &dir.path().join("e.png")),
            Err(PlotError::NoPoints { .. })
        ));
    }
}
