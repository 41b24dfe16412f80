//! `tokscope compare`'s command line and its validation into a [`ComparePlan`]. The speed
//! flags are bench's (and llama-bench's), and are validated by bench's own parser.

use std::path::PathBuf;

use clap::{ArgAction, Args};

use super::quantize::QuantType;
use crate::bench::{BenchArgs, BenchPlan};
use crate::commands::{Failure, USAGE};
use crate::config::Settings;

/// Compare quantizations and settings of one model on speed and quality, in one table.
#[derive(Debug, Args, Default, Clone)]
pub struct CompareArgs {
    /// GGUF files of one model; repeat for several. With --quantize: the one high-precision
    /// source (F32, F16 or BF16).
    #[arg(short = 'm', long, value_name = "FILE", action = ArgAction::Append)]
    pub model: Vec<PathBuf>,
    /// Quantize the source to these types in-process (cached; reused when present), e.g.
    /// q8_0,q6_k,q5_k_m,q4_k_m,q4_0.
    #[arg(long, value_name = "TYPE,…", action = ArgAction::Append)]
    pub quantize: Vec<String>,
    /// Let --quantize start from an already quantized file (its errors add to the new ones;
    /// quality is then measured against that file, not the original weights).
    #[arg(long)]
    pub allow_requantize: bool,
    /// Evaluation text (default: the public-domain text shipped in assets/eval).
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// Tokens per evaluation chunk; the second half of each chunk is scored [default: 512].
    #[arg(
        short = 'c',
        long = "ctx-size",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub ctx_size: Option<String>,
    /// Evaluate at most this many chunks [default: all the text holds].
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub chunks: Option<String>,
    /// Prompt tokens of the speed test (pp) [default: 512].
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub n_prompt: Option<String>,
    /// Generated tokens of the speed test (tg) [default: 128].
    #[arg(
        short = 'n',
        long = "n-gen",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub n_gen: Option<String>,
    /// Rounds of the speed tests: each round loads every candidate, warms up and times one
    /// run, alternating the order, so machine drift hits all alike [default: 3].
    #[arg(
        short = 'r',
        long = "repetitions",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub repetitions: Option<String>,
    /// CPU threads [default: config `threads`].
    #[arg(
        short = 't',
        long = "threads",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub threads: Option<String>,
    /// GPU layers to compare, -1 = all (-ngl) [default: -1].
    #[arg(long = "n-gpu-layers", value_name = "N,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub n_gpu_layers: Vec<String>,
    /// KV-cache types of keys to compare (-ctk): f16, q8_0, q4_0, … [default: f16].
    #[arg(long = "cache-type-k", value_name = "TYPE,…", action = ArgAction::Append)]
    pub cache_type_k: Vec<String>,
    /// KV-cache types of values to compare (-ctv) [default: f16].
    #[arg(long = "cache-type-v", value_name = "TYPE,…", action = ArgAction::Append)]
    pub cache_type_v: Vec<String>,
    /// Flash attention settings to compare (-fa): auto, on/1, off/0 [default: auto].
    #[arg(long = "flash-attn", value_name = "MODE,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub flash_attn: Vec<String>,
    /// Output format: md, csv, json [default: md].
    #[arg(short = 'o', long = "output", value_name = "FORMAT")]
    pub output: Option<String>,
    /// Draw speed against KL divergence as FILE.png or FILE.svg.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Peak memory bandwidth for the roofline, GB/s (as in bench).
    #[arg(long = "bandwidth-gb-s", value_name = "X", allow_hyphen_values = true)]
    pub bandwidth_gb_s: Option<String>,
    /// USD per GPU-hour for cost per 1M tokens (as in bench).
    #[arg(long = "price", value_name = "USD", allow_hyphen_values = true)]
    pub price: Option<String>,
    /// Do not measure the CPU's memory bandwidth.
    #[arg(long)]
    pub no_probe: bool,
    /// Quality only: skip the speed tests.
    #[arg(long)]
    pub no_speed: bool,
}

/// How `compare` prints its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareFormat {
    Markdown,
    Csv,
    Json,
}

/// Everything `compare` will do, validated.
#[derive(Debug, Clone)]
pub struct ComparePlan {
    /// The files as given (before quantizing).
    pub models: Vec<PathBuf>,
    pub quantize: Vec<QuantType>,
    pub allow_requantize: bool,
    pub text: Option<PathBuf>,
    pub n_ctx: u32,
    pub max_chunks: Option<u32>,
    pub threads: u32,
    /// Speed tests and the settings to compare, through bench's validated plan.
    pub bench: BenchPlan,
    pub output: CompareFormat,
    pub plot: Option<PathBuf>,
    pub speed: bool,
}

fn bad(flag: &str, value: &str, expected: &str) -> Failure {
    Failure::new(
        USAGE,
        format!("invalid value `{value}` for {flag}: {expected}"),
    )
}

fn parse_count(flag: &str, value: &str, min: u32, max: u32) -> Result<u32, Failure> {
    match value.trim().parse::<u32>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(bad(
            flag,
            value,
            &format!("one whole number from {min} to {max}"),
        )),
    }
}

impl ComparePlan {
    pub fn from_args(args: &CompareArgs, settings: &Settings) -> Result<Self, Failure> {
        let quantize = args
            .quantize
            .iter()
            .flat_map(|q| q.split(','))
            .filter(|q| !q.trim().is_empty())
            .map(|q| {
                QuantType::parse(q).map_err(|e| Failure::new(USAGE, format!("--quantize: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !quantize.is_empty() && args.model.len() > 1 {
            return Err(Failure::new(
                USAGE,
                "--quantize takes one source model (-m), the high-precision file to quantize",
            ));
        }
        let n_ctx = match &args.ctx_size {
            Some(v) => parse_count("-c/--ctx-size", v, 16, 1 << 16)?,
            None => 512,
        };
        let max_chunks = match &args.chunks {
            Some(v) => Some(parse_count("--chunks", v, 1, u32::MAX)?),
            None => None,
        };
        let threads = match &args.threads {
            Some(v) => parse_count("-t/--threads", v, 1, 1024)?,
            None => settings.engine.threads,
        };
        let output = match args
            .output
            .as_deref()
            .map(|o| o.trim().to_ascii_lowercase())
        {
            None => CompareFormat::Markdown,
            Some(o) if o == "md" || o == "markdown" => CompareFormat::Markdown,
            Some(o) if o == "csv" => CompareFormat::Csv,
            Some(o) if o == "json" => CompareFormat::Json,
            Some(o) => return Err(bad("-o/--output", &o, "one of md, csv, json")),
        };
        if let Some(p) = &args.plot {
            crate::plot::plot_file_kind(p)
                .map_err(|e| Failure::new(USAGE, format!("--plot: {e}")))?;
        }
        let bench_args = BenchArgs {
            model: args.model.clone(),
            n_prompt: vec![args.n_prompt.clone().unwrap_or_else(|| "512".into())],
            n_gen: vec![args.n_gen.clone().unwrap_or_else(|| "128".into())],
            repetitions: Some(args.repetitions.clone().unwrap_or_else(|| "3".into())),
            threads: vec![threads.to_string()],
            n_gpu_layers: args.n_gpu_layers.clone(),
            cache_type_k: args.cache_type_k.clone(),
            cache_type_v: args.cache_type_v.clone(),
            flash_attn: args.flash_attn.clone(),
            bandwidth_gb_s: args.bandwidth_gb_s.clone(),
            price: args.price.clone(),
            no_probe: args.no_probe,
            ..BenchArgs::default()
        };
        let bench = BenchPlan::from_args(&bench_args, settings)?;
        if bench.sweep.tests.is_empty() && !args.no_speed {
            return Err(Failure::new(
                USAGE,
                "-p and -n are both 0: no speed test to run (add --no-speed for quality only)",
            ));
        }
        Ok(Self {
            models: bench.models.clone(),
            quantize,
            allow_requantize: args.allow_requantize,
            text: args.text.clone(),
            n_ctx,
            max_chunks,
            threads,
            bench,
            output,
            plot: args.plot.clone(),
            speed: !args.no_speed,
        })
    }
}
