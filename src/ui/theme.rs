//! Every style the screen uses, in one place. Colours are the standard eight, used sparingly and
//! always together with a modifier (bold, reversed, dim), so the screen stays readable on dark and
//! on light terminals; no other file builds a `Style`.

use ratatui::style::{Color, Modifier, Style};

/// Plain text in the terminal's own colours.
pub(crate) const TEXT: Style = Style::new();
pub(crate) const DIM: Style = Style::new().add_modifier(Modifier::DIM);
pub(crate) const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);

// Conversation.
pub(crate) const USER_LABEL: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
pub(crate) const ASSISTANT_LABEL: Style =
    Style::new().fg(Color::Green).add_modifier(Modifier::BOLD);
pub(crate) const USER_TEXT: Style = Style::new();
pub(crate) const SYSTEM_PROMPT: Style =
    Style::new().add_modifier(Modifier::DIM.union(Modifier::ITALIC));
pub(crate) const STREAM_CURSOR: Style = Style::new().fg(Color::Green).add_modifier(Modifier::BOLD);
pub(crate) const WAITING: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::ITALIC);
pub(crate) const TURN_FOOTER: Style = Style::new().add_modifier(Modifier::DIM);
pub(crate) const STOPPED: Style = Style::new()
    .fg(Color::Yellow)
    .add_modifier(Modifier::BOLD.union(Modifier::REVERSED));
pub(crate) const FAILED: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
pub(crate) const SCROLL_HINT: Style = Style::new()
    .fg(Color::Cyan)
    .add_modifier(Modifier::REVERSED.union(Modifier::BOLD));
pub(crate) const WELCOME_TITLE: Style = Style::new().add_modifier(Modifier::BOLD);
pub(crate) const KEY: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);

// A scored answer's tokens by KLD band (`metrics::quality::KLD_BANDS`, Alt+K).
pub(crate) const KLD_BAND: [Style; 4] = [
    Style::new(),
    Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
    Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
];
/// The token the token screen's cursor is on (`Alt+T`).
pub(crate) const TOKEN_CURSOR: Style = Style::new()
    .bg(Color::Blue)
    .fg(Color::White)
    .add_modifier(Modifier::BOLD);
/// Added to the token where the two models' most likely tokens first differ.
pub(crate) const FIRST_DIVERGENCE: Modifier = Modifier::REVERSED;
/// Added to a token the reference gave under `metrics::quality::LOW_P`.
pub(crate) const BELOW_LOW_P: Modifier = Modifier::UNDERLINED;

// Markdown.
pub(crate) const MD_H1: Style =
    Style::new().add_modifier(Modifier::BOLD.union(Modifier::UNDERLINED));
pub(crate) const MD_H2: Style = Style::new().add_modifier(Modifier::BOLD);
pub(crate) const MD_H3: Style = Style::new().add_modifier(Modifier::BOLD.union(Modifier::ITALIC));
pub(crate) const MD_EMPHASIS: Style = Style::new().add_modifier(Modifier::ITALIC);
pub(crate) const MD_STRONG: Style = Style::new().add_modifier(Modifier::BOLD);
pub(crate) const MD_STRIKE: Style = Style::new().add_modifier(Modifier::CROSSED_OUT);
pub(crate) const MD_LINK: Style = Style::new()
    .fg(Color::Blue)
    .add_modifier(Modifier::UNDERLINED);
pub(crate) const MD_INLINE_CODE: Style = Style::new().fg(Color::Magenta);
pub(crate) const MD_CODE_BLOCK: Style = Style::new().fg(Color::Magenta);
pub(crate) const MD_CODE_FRAME: Style = Style::new().add_modifier(Modifier::DIM);
pub(crate) const MD_LIST_MARKER: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
pub(crate) const MD_QUOTE: Style = Style::new().add_modifier(Modifier::ITALIC);
pub(crate) const MD_QUOTE_BAR: Style = Style::new().add_modifier(Modifier::DIM);
pub(crate) const MD_RULE: Style = Style::new().add_modifier(Modifier::DIM);

// Metrics column.
pub(crate) const PANE_BORDER: Style = Style::new().add_modifier(Modifier::DIM);
pub(crate) const METRIC_HEADER: Style = Style::new().add_modifier(Modifier::BOLD);
pub(crate) const METRIC_LABEL: Style = Style::new();
pub(crate) const METRIC_SUB_LABEL: Style = Style::new().add_modifier(Modifier::DIM);
pub(crate) const METRIC_VALUE: Style = Style::new().add_modifier(Modifier::BOLD);
pub(crate) const METRIC_KEY_VALUE: Style =
    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
pub(crate) const METRIC_SECTION: Style =
    Style::new().add_modifier(Modifier::BOLD.union(Modifier::UNDERLINED));
pub(crate) const SPARKLINE: Style = Style::new().fg(Color::Cyan);
pub(crate) const GAUGE_FILLED: Style = Style::new().fg(Color::Green);
pub(crate) const GAUGE_FULL: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
pub(crate) const GAUGE_EMPTY: Style = Style::new().add_modifier(Modifier::DIM);
pub(crate) const SYNTHETIC: Style = Style::new()
    .fg(Color::Yellow)
    .add_modifier(Modifier::BOLD.union(Modifier::REVERSED));

// Status line and notices.
pub(crate) const STATUS_BAR: Style = Style::new().add_modifier(Modifier::REVERSED);
pub(crate) const STATUS_SEPARATOR: Style =
    Style::new().add_modifier(Modifier::REVERSED.union(Modifier::DIM));
pub(crate) const STATUS_NAME: Style =
    Style::new().add_modifier(Modifier::REVERSED.union(Modifier::BOLD));
pub(crate) const STATE_READY: Style = Style::new()
    .fg(Color::Green)
    .add_modifier(Modifier::REVERSED.union(Modifier::BOLD));
pub(crate) const STATE_BUSY: Style = Style::new()
    .fg(Color::Cyan)
    .add_modifier(Modifier::REVERSED.union(Modifier::BOLD));
pub(crate) const STATE_STOPPED: Style = STOPPED;
pub(crate) const STATE_ERROR: Style = Style::new()
    .fg(Color::Red)
    .add_modifier(Modifier::REVERSED.union(Modifier::BOLD));
pub(crate) const NOTICE_INFO: Style = Style::new().fg(Color::Cyan);
pub(crate) const NOTICE_WARNING: Style =
    Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
pub(crate) const NOTICE_ERROR: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
pub(crate) const METRICS_STRIP: Style = Style::new().add_modifier(Modifier::DIM);

// Input box.
pub(crate) const INPUT_BORDER: Style = Style::new().add_modifier(Modifier::DIM);
pub(crate) const INPUT_TITLE: Style = Style::new().add_modifier(Modifier::BOLD);
pub(crate) const INPUT_TEXT: Style = Style::new();
pub(crate) const INPUT_PLACEHOLDER: Style = Style::new().add_modifier(Modifier::DIM);
pub(crate) const INPUT_PROMPT: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);

// Help overlay and the too-small screen.
pub(crate) const HELP_BORDER: Style = Style::new().fg(Color::Cyan);
pub(crate) const HELP_TITLE: Style = Style::new().add_modifier(Modifier::BOLD);
pub(crate) const HELP_SECTION: Style =
    Style::new().add_modifier(Modifier::BOLD.union(Modifier::UNDERLINED));
pub(crate) const HELP_KEY: Style = KEY;
pub(crate) const HELP_TEXT: Style = Style::new();
pub(crate) const TOO_SMALL: Style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);

// Bench screen (batching charts).
pub(crate) const SERIES_AGGREGATE: Style = Style::new().fg(Color::Green);
pub(crate) const SERIES_PER_SEQUENCE: Style = Style::new().fg(Color::Cyan);
pub(crate) const SERIES_P50: Style = Style::new().fg(Color::Cyan);
pub(crate) const SERIES_P99: Style = Style::new().fg(Color::Magenta);
pub(crate) const AXIS: Style = Style::new().add_modifier(Modifier::DIM);

// A/B screen: the part of an answer after the first difference from the other.
pub(crate) const AB_DIVERGED: Style = Style::new()
    .fg(Color::Yellow)
    .add_modifier(Modifier::ITALIC);

// Compare screen.
pub(crate) const TABLE_HEADER: Style =
    Style::new().add_modifier(Modifier::BOLD.union(Modifier::UNDERLINED));
pub(crate) const PARETO: Style = Style::new().fg(Color::Green).add_modifier(Modifier::BOLD);
pub(crate) const DOMINATED: Style = Style::new().add_modifier(Modifier::DIM);
