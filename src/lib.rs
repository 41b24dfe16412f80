//! tokscope: a terminal chat for local LLMs that measures them while they talk.
//!
//! The library holds every part of the application so that tests, benchmarks and the binary
//! all build the real thing; `main.rs` only parses the command line and dispatches.

/// `Display` and `Serialize` as the value's `name()`: a setting is written as it is typed.
macro_rules! shown_by_name {
    ($($t:ty),+ $(,)?) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
    )+};
}

pub mod app;
pub mod bench;
pub mod commands;
pub mod compare;
pub mod config;
pub mod demo;
pub mod discover;
pub mod doctor;
pub mod engine;
pub mod fatal;
pub(crate) mod fmt;
pub mod fsx;
pub mod gguf;
pub mod history;
pub mod hw;
pub mod ids;
pub mod llama;
pub mod load;
pub mod logging;
pub mod metrics;
pub mod paths;
pub(crate) mod pip;
pub mod plot;
pub mod remote;
pub(crate) mod report;
pub mod stamp;
pub mod synth;
pub mod text;
pub mod tokcount;
pub mod tui;
pub mod ui;
