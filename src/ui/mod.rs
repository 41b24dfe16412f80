//! Drawing the chat screen. `draw` lays out the panes (status line on top, the conversation
//! with the metrics column beside it, the notice line and the input box at the bottom, the help
//! overlay above everything) and hands each its area; one file per pane, every style in
//! `theme`. Drawing reads the state and never changes it, does no I/O and never reads the
//! clock: `now` is passed in.

mod ab;
mod bench;
mod compare;
pub mod conversation;
mod depth;
mod format;
mod help;
mod input;
mod markdown;
mod metrics_pane;
mod picker;
mod profile;
mod status;
pub(crate) mod text;
mod theme;
mod tokens;
mod view;

use std::time::Instant;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::app::{App, Mode, NoticeKind};

/// Below this size only the "terminal too small" message is drawn.
pub(crate) const MIN_WIDTH: u16 = 50;
pub(crate) const MIN_HEIGHT: u16 = 12;

/// From this width on, the metrics column sits beside the conversation; below it the key
/// figures share one line above the input.
const METRICS_COLUMN_MIN_WIDTH: u16 = 70;

/// Draw the whole screen for `app` as of `now`.
/// What a frame learnt that the state cannot know before it is drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drawn {
    /// The conversation was drawn scrolled up and can scroll up at most this far (lines from
    /// the bottom): the loop hands it back to `update` as `Msg::ScrollLimit`.
    pub scroll_limit: Option<usize>,
}

pub fn draw(frame: &mut Frame, app: &App, now: Instant) -> Drawn {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        too_small(frame, area);
        return Drawn::default();
    }
    let view = view::View::new(app, now);
    let column = area.width >= METRICS_COLUMN_MIN_WIDTH;
    let notice = notice_lines(app, area.width as usize);
    let input_h = input::height(app, area.width, input::max_rows(area.height));
    let [status_area, body, strip_area, notice_area, input_area] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(u16::from(!column)),
        Constraint::Length(notice.len() as u16),
        Constraint::Length(input_h),
    ])
    .areas(area);

    status::draw(frame, status_area, app, &view);
    let scroll_limit;
    if column {
        let metrics_w = (area.width * 3 / 10).clamp(30, 40);
        let [conversation_area, metrics_area] =
            Layout::horizontal([Constraint::Min(1), Constraint::Length(metrics_w)]).areas(body);
        scroll_limit = conversation::draw(frame, conversation_area, app, &view);
        metrics_pane::draw(frame, metrics_area, app, &view);
    } else {
        scroll_limit = conversation::draw(frame, body, app, &view);
        frame.render_widget(Paragraph::new(metrics_pane::strip(&view)), strip_area);
    }
    frame.render_widget(Paragraph::new(notice), notice_area);
    input::draw(frame, input_area, app);
    // Full-screen views cover everything below the status line.
    let below_status = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    match app.mode {
        Mode::Bench if app.bench.view == crate::app::SweepView::Depth => {
            depth::draw(frame, below_status, app)
        }
        Mode::Bench => bench::draw(frame, below_status, app),
        Mode::Ab => ab::draw(frame, below_status, app, &view),
        Mode::Compare => compare::draw(frame, below_status, app),
        Mode::Picker => picker::draw(frame, below_status, app),
        Mode::Profile => profile::draw(frame, below_status, app),
        Mode::Tokens => tokens::draw(frame, below_status, app),
        Mode::Help => help::draw(frame, below_status, app),
        Mode::Chat => {}
    }
    // Last: the cells this terminal's wider clusters cover (see `text::fit_buffer`).
    text::fit_buffer(frame.buffer_mut());
    Drawn { scroll_limit }
}

/// The notice, on at most two lines.
fn notice_lines(app: &App, width: usize) -> Vec<Line<'static>> {
    let Some(notice) = &app.notice else {
        return Vec::new();
    };
    let (icon, style) = match notice.kind {
        NoticeKind::Info => ("• ", theme::NOTICE_INFO),
        NoticeKind::Warning => ("⚠ ", theme::NOTICE_WARNING),
        NoticeKind::Error => ("✗ ", theme::NOTICE_ERROR),
    };
    let mut lines = text::wrap(
        &[Span::styled(text::one_line(&notice.text), style)],
        width,
        &[Span::styled(icon, style)],
        &[Span::raw("  ")],
    );
    if lines.len() > 2 {
        lines.truncate(2);
        if let Some(last) = lines.last_mut() {
            let shown: String = last.spans.iter().map(|s| s.content.as_ref()).collect();
            *last = Line::from(Span::styled(
                text::truncate(&format!("{shown}…"), width),
                style,
            ));
        }
    }
    lines
}

fn too_small(frame: &mut Frame, area: Rect) {
    if area.is_empty() {
        return;
    }
    let (w, h) = (area.width, area.height);
    // The longest message that fits, down to the bare minimum size.
    let candidates = [
        format!("terminal too small ({w}×{h}, need at least {MIN_WIDTH}×{MIN_HEIGHT})"),
        format!("too small: {w}×{h} < {MIN_WIDTH}×{MIN_HEIGHT}"),
        format!("need {MIN_WIDTH}×{MIN_HEIGHT}"),
        format!("{MIN_WIDTH}×{MIN_HEIGHT}"),
        "!".to_string(),
    ];
    let wrapped = |message: &String| {
        text::wrap(
            &[Span::styled(message.clone(), theme::TOO_SMALL)],
            w as usize,
            &[],
            &[],
        )
    };
    let lines = candidates
        .iter()
        .map(wrapped)
        .find(|lines| {
            lines.len() <= h as usize && lines.iter().all(|l| text::line_width(l) <= w as usize)
        })
        .unwrap_or_default();
    let top = (h as usize).saturating_sub(lines.len()) / 2;
    let centred: Vec<Line<'static>> = lines.into_iter().map(|l| l.centered()).collect();
    let rect = Rect {
        y: area.y + top as u16,
        height: h - top as u16,
        ..area
    };
    frame.render_widget(Paragraph::new(centred), rect);
}

/// The frame of a full screen (bench, compare, A/B): cleared, bordered, titled. Returns the
/// area inside the border.
fn screen_block(frame: &mut Frame, area: Rect, title: String) -> Rect {
    use ratatui::widgets::{Block, Borders, Clear};
    frame.render_widget(Clear, area);
    let block = Block::new()
        .borders(Borders::ALL)
        .border_style(theme::HELP_BORDER)
        .title(Span::styled(title, theme::HELP_TITLE));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    inner
}
