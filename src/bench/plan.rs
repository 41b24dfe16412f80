//! What `bench` will do, validated (the command line is parsed into it in `commands::bench`).

use std::path::PathBuf;

use super::sweep::Sweep;
use crate::engine::{ChatMessage, EngineError, EngineSettings};
use crate::llama::settings::SpecMode;

/// How the results are printed on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputFormat {
    /// llama-bench's columns, within about 120 columns.
    Markdown,
    /// `-o md+`: every column (TTFT, ITL, host time, the roofline, cost, energy).
    MarkdownWide,
    Csv,
    Json,
    JsonLines,
}

impl OutputFormat {
    /// A Markdown table, narrow or wide.
    pub(crate) fn is_markdown(self) -> bool {
        matches!(self, OutputFormat::Markdown | OutputFormat::MarkdownWide)
    }

    /// How the text is made safe on its way to stdout.
    pub(crate) fn shape(self) -> crate::text::Shape {
        match self {
            OutputFormat::Markdown | OutputFormat::MarkdownWide => crate::text::Shape::Human,
            OutputFormat::Csv => crate::text::Shape::Csv,
            OutputFormat::Json | OutputFormat::JsonLines => crate::text::Shape::Json,
        }
    }
}

/// Where the peak memory bandwidth comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum BandwidthChoice {
    /// `--bandwidth-gb-s` or the config's `bandwidth_gb_s`, in bytes per second.
    Configured(f64),
    /// The GPU's datasheet value, else the CPU copy probe unless `probe` is false.
    Auto { probe: bool },
}

/// Everything `bench` will do, validated.
#[derive(Debug, Clone)]
pub(crate) struct BenchPlan {
    pub models: Vec<PathBuf>,
    pub sweep: Sweep,
    pub repetitions: u32,
    pub warmup: bool,
    pub output: OutputFormat,
    pub bandwidth: BandwidthChoice,
    pub price_per_gpu_hour_usd: f64,
    /// Electricity price for the energy cost per 1M tokens (config `price_per_kwh`).
    pub price_per_kwh: Option<f64>,
    pub vs: Option<String>,
    pub plot: Option<crate::fsx::Output>,
    /// `--profile`: one generation step in this many of tg and pg tests is profiled (0: off),
    /// shown at this level under the table.
    pub profile_rate: u32,
    pub profile_level: crate::metrics::profile::ProfileLevel,
    /// `--trace`: keep every timed repetition's events (`bench::trace`).
    pub trace: bool,
}

/// What a speculative sweep does, validated (parsed in `commands::bench`).
#[derive(Debug, Clone)]
pub(crate) struct SpecPlan {
    pub model: PathBuf,
    /// `Ngram` or `Draft`.
    pub mode: SpecMode,
    pub draft: Option<PathBuf>,
    /// The k values, 0 (the baseline) first, each once.
    pub draft_max: Vec<u32>,
    pub ngram_n: u32,
    /// Tokens every turn generates (end-of-generation and stop strings ignored).
    pub n_gen: u32,
    pub rounds: u32,
    pub warmup: bool,
    /// The conversation each turn answers (system prompt, the prompt).
    pub messages: Vec<ChatMessage>,
    /// Where the prompt came from: a file name or "built-in copy-heavy prompt".
    pub prompt_source: String,
    /// The engine settings of every k but its speculation (threads, context, template).
    pub engine: EngineSettings,
    pub output: OutputFormat,
    pub plot: Option<crate::fsx::Output>,
    /// `--vs last|ID`: the earlier sweep of the results log to compare with, k by k.
    pub vs: Option<String>,
    /// Measure plain decoding on llama.cpp's default kernels too, each round in a child
    /// process (`bench::kernel_baseline`): on whenever the sweep runs on batch-invariant
    /// kernels, so that its speed-ups can be read against what the user had before.
    pub kernel_baseline: bool,
}

/// Why a sweep could not finish.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpecBenchError {
    #[error("{lane}: {source}")]
    Engine {
        /// `k=3`, or `run c4096` / `tg` for `bench --run-vs-tg`.
        lane: String,
        #[source]
        source: EngineError,
    },
    #[error("{lane}: the turn stopped after {got} of {want} tokens ({why}); shorten the prompt or ask for fewer tokens (-n)")]
    Short {
        lane: String,
        got: usize,
        want: u32,
        why: String,
    },
}

impl SpecBenchError {
    /// A problem with a model file (exit code 3, like `run`).
    pub(crate) fn is_model_problem(&self) -> bool {
        matches!(self, SpecBenchError::Engine { source, .. } if source.is_model_problem())
    }

    /// The error of lane `lane` from a failed engine.
    pub(super) fn in_lane(lane: impl Into<String>) -> impl FnOnce(EngineError) -> Self {
        let lane = lane.into();
        move |source| SpecBenchError::Engine { lane, source }
    }
}
