//! The chat in a real terminal (tmux) and its event loop: streaming, editing, widths, the picker, signals and crashes.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "common/mod.rs"]
mod common;

#[path = "e2e_daily.rs"]
mod e2e_daily;
#[path = "e2e_editor.rs"]
mod e2e_editor;
#[path = "e2e_quality.rs"]
mod e2e_quality;
#[path = "e2e_tmux.rs"]
mod e2e_tmux;
#[path = "e2e_width.rs"]
mod e2e_width;
#[path = "model_picker.rs"]
mod model_picker;
#[path = "robustness.rs"]
mod robustness;
#[path = "stream_vt100.rs"]
mod stream_vt100;
#[path = "tui_loop.rs"]
mod tui_loop;
