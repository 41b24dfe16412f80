//! What `compare` will do, validated (the command line is parsed into it in
//! `commands::compare`).

use std::path::PathBuf;

use super::quantize::QuantType;
use crate::bench::BenchPlan;

/// How `compare` prints its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompareFormat {
    /// The columns that answer the question, within about 120 columns.
    Markdown,
    /// `-o md+`: every column (KLD tails, Δp, ceiling, MBU, cost).
    MarkdownWide,
    Csv,
    Json,
}

impl CompareFormat {
    /// How the text is made safe on its way to stdout.
    pub(crate) fn shape(self) -> crate::text::Shape {
        match self {
            CompareFormat::Markdown | CompareFormat::MarkdownWide => crate::text::Shape::Human,
            CompareFormat::Csv => crate::text::Shape::Csv,
            CompareFormat::Json => crate::text::Shape::Json,
        }
    }
}

/// Everything `compare` will do, validated.
#[derive(Debug, Clone)]
pub(crate) struct ComparePlan {
    /// The files as given (before quantizing).
    pub models: Vec<PathBuf>,
    pub quantize: Vec<QuantType>,
    /// `--reference`: the file quality is measured against (one of `models`).
    pub reference: Option<PathBuf>,
    pub allow_requantize: bool,
    pub text: Option<PathBuf>,
    pub n_ctx: u32,
    pub max_chunks: Option<u32>,
    /// Tokens each model decodes at a time while scoring (`--scoring-block`).
    pub scoring_block: u32,
    pub threads: u32,
    /// Speed tests and the settings to compare, through bench's validated plan.
    pub bench: BenchPlan,
    pub output: CompareFormat,
    pub plot: Option<crate::fsx::Output>,
    pub speed: bool,
    /// `--max-kld`, `--min-same-top`: the quality a user gives up at most.
    pub budget: super::Budget,
}
