//! Every style the screen uses, in one place. Colours are the standard eight, used sparingly and
//! always together with a modifier (bold, reversed, dim), so the screen stays readable on dark and
//! on light terminals; no other file builds a `Style`.

use ratatui::style::{Color, Modifier, Style};

/// Plain text in the terminal's own colours.
pub const TEXT: Style = Style::new();
pub const DIM: Style = Style::new().add_modifier(Modifier::DIM);
pub const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);

// Conversation.
pub const USER_LABEL: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
pub const ASSISTANT_LABEL: Style = Style::new().fg(Color::Green).add_modifier(Modifier::BOLD);
pub const USER_TEXT: Style = Style::new();
pub const SYSTEM_PROMPT: Style = Style::new()
    .add_modifier(Modifier::DIM)
    .add_modifier(Modifier::ITALIC);
pub const STREAM_CURSOR: Style = Style::new().fg(Color::Green).add_modifier(Modifier::BOLD);
pub const WAITING: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::ITALIC);
pub const TURN_FOOTER: Style = Style::new().add_modifier(Modifier::DIM);
pub const STOPPED: Style = Style::new()
    .fg(Color::Yellow)
    .add_modifier(Modifier::BOLD)
    .add_modifier(Modifier::REVERSED);
pub const FAILED: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
pub const SCROLL_HINT: Style = Style::new()
    .fg(Color::Cyan)
    .add_modifier(Modifier::REVERSED)
    .add_modifier(Modifier::BOLD);
pub const WELCOME_TITLE: Style = Style::new().add_modifier(Modifier::BOLD);
pub const KEY: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);

// Markdown.
pub const MD_H1: Style = Style::new()
    .add_modifier(Modifier::BOLD)
    .add_modifier(Modifier::UNDERLINED);
pub const MD_H2: Style = Style::new().add_modifier(Modifier::BOLD);
pub const MD_H3: Style = Style::new()
    .add_modifier(Modifier::BOLD)
    .add_modifier(Modifier::ITALIC);
pub const MD_EMPHASIS: Style = Style::new().add_modifier(Modifier::ITALIC);
pub const MD_STRONG: Style = Style::new().add_modifier(Modifier::BOLD);
pub const MD_STRIKE: Style = Style::new().add_modifier(Modifier::CROSSED_OUT);
pub const MD_LINK: Style = Style::new()
    .fg(Color::Blue)
    .add_modifier(Modifier::UNDERLINED);
pub const MD_INLINE_CODE: Style = Style::new().fg(Color::Magenta);
pub const MD_CODE_BLOCK: Style = Style::new().fg(Color::Magenta);
pub const MD_CODE_FRAME: Style = Style::new().add_modifier(Modifier::DIM);
pub const MD_LIST_MARKER: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
pub const MD_QUOTE: Style = Style::new().add_modifier(Modifier::ITALIC);
pub const MD_QUOTE_BAR: Style = Style::new().add_modifier(Modifier::DIM);
pub const MD_RULE: Style = Style::new().add_modifier(Modifier::DIM);

// Metrics column.
pub const PANE_BORDER: Style = Style::new().add_modifier(Modifier::DIM);
pub const METRIC_HEADER: Style = Style::new().add_modifier(Modifier::BOLD);
pub const METRIC_LABEL: Style = Style::new();
pub const METRIC_SUB_LABEL: Style = Style::new().add_modifier(Modifier::DIM);
pub const METRIC_VALUE: Style = Style::new().add_modifier(Modifier::BOLD);
pub const METRIC_KEY_VALUE: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
pub const METRIC_SECTION: Style = Style::new()
    .add_modifier(Modifier::BOLD)
    .add_modifier(Modifier::UNDERLINED);
pub const SPARKLINE: Style = Style::new().fg(Color::Cyan);
pub const GAUGE_FILLED: Style = Style::new().fg(Color::Green);
pub const GAUGE_FULL: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
pub const GAUGE_EMPTY: Style = Style::new().add_modifier(Modifier::DIM);
pub const SYNTHETIC: Style = Style::new()
    .fg(Color::Yellow)
    .add_modifier(Modifier::BOLD)
    .add_modifier(Modifier::REVERSED);

// Status line and notices.
pub const STATUS_BAR: Style = Style::new().add_modifier(Modifier::REVERSED);
pub const STATUS_SEPARATOR: Style = Style::new()
    .add_modifier(Modifier::REVERSED)
    .add_modifier(Modifier::DIM);
pub const STATUS_NAME: Style = Style::new()
    .add_modifier(Modifier::REVERSED)
    .add_modifier(Modifier::BOLD);
pub const STATE_READY: Style = Style::new()
    .fg(Color::Green)
    .add_modifier(Modifier::REVERSED)
    .add_modifier(Modifier::BOLD);
pub const STATE_BUSY: Style = Style::new()
    .fg(Color::Cyan)
    .add_modifier(Modifier::REVERSED)
    .add_modifier(Modifier::BOLD);
pub const STATE_STOPPED: Style = STOPPED;
pub const STATE_ERROR: Style = Style::new()
    .fg(Color::Red)
    .add_modifier(Modifier::REVERSED)
    .add_modifier(Modifier::BOLD);
pub const NOTICE_INFO: Style = Style::new().fg(Color::Cyan);
pub const NOTICE_WARNING: Style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
pub const NOTICE_ERROR: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
pub const METRICS_STRIP: Style = Style::new().add_modifier(Modifier::DIM);

// Input box.
pub const INPUT_BORDER: Style = Style::new().add_modifier(Modifier::DIM);
pub const INPUT_TITLE: Style = Style::new().add_modifier(Modifier::BOLD);
pub const INPUT_TEXT: Style = Style::new();
pub const INPUT_PLACEHOLDER: Style = Style::new().add_modifier(Modifier::DIM);
pub const INPUT_PROMPT: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);

// Help overlay and the too-small screen.
pub const HELP_BORDER: Style = Style::new().fg(Color::Cyan);
pub const HELP_TITLE: Style = Style::new().add_modifier(Modifier::BOLD);
pub const HELP_SECTION: Style = Style::new()
    .add_modifier(Modifier::BOLD)
    .add_modifier(Modifier::UNDERLINED);
pub const HELP_KEY: Style = KEY;
pub const HELP_TEXT: Style = Style::new();
pub const TOO_SMALL: Style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);

// Bench screen (batching charts).
pub const SERIES_AGGREGATE: Style = Style::new().fg(Color::Green);
pub const SERIES_PER_SEQUENCE: Style = Style::new().fg(Color::Cyan);
pub const SERIES_P50: Style = Style::new().fg(Color::Cyan);
pub const SERIES_P99: Style = Style::new().fg(Color::Magenta);
pub const AXIS: Style = Style::new().add_modifier(Modifier::DIM);

// A/B screen: the part of an answer after the first difference from the other.
pub const AB_DIVERGED: Style = Style::new()
    .fg(Color::Yellow)
    .add_modifier(Modifier::ITALIC);

// Compare screen.
pub const TABLE_HEADER: Style = Style::new()
    .add_modifier(Modifier::BOLD)
    .add_modifier(Modifier::UNDERLINED);
pub const PARETO: Style = Style::new().fg(Color::Green).add_modifier(Modifier::BOLD);
pub const DOMINATED: Style = Style::new().add_modifier(Modifier::DIM);
