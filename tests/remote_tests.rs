//! `--url` and `load` against a real llama-server and a scripted hostile one.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "common/mod.rs"]
mod common;

#[path = "load_export.rs"]
mod load_export;
#[path = "remote_chat.rs"]
mod remote_chat;
#[path = "remote_faults.rs"]
mod remote_faults;
#[path = "remote_reasoning.rs"]
mod remote_reasoning;
#[path = "remote_screen.rs"]
mod remote_screen;
#[path = "remote_server.rs"]
mod remote_server;
