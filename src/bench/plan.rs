//! What `bench` will do, validated (the command line is parsed into it in `commands::bench`).

use std::path::PathBuf;

use super::sweep::Sweep;

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
