//! `tokscope compare`'s command line and its validation into a [`ComparePlan`]. The speed
//! flags are bench's (and llama-bench's), and are validated by bench's own parser.

use std::path::PathBuf;

use clap::{ArgAction, Args};

use super::bench::{bad_value, BenchArgs};
use super::flags::{RooflineFlags, RuntimeSweepFlags};
use crate::commands::{Failure, FAILURE, MODEL};
use crate::compare::quantize::QuantType;
use crate::compare::{CompareError, CompareFormat, ComparePlan};
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
    /// The quality reference: one of the -m files [default: the source of --quantize, else
    /// the file with the most bits per weight among those with real weights]. A synthetic
    /// file (written by `tokscope synth`: random weights) is never the reference of real
    /// weights.
    #[arg(long, value_name = "FILE")]
    pub reference: Option<PathBuf>,
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
    /// Tokens each model decodes at a time while scoring a chunk [default: llama.cpp's
    /// micro-batch, 512, or -c when smaller]: the logits held grow with this, not with -c. A
    /// multiple of the micro-batch, or -c: each chunk is then one decode call as
    /// llama-perplexity makes it (memory growing with -c × vocabulary); the figures are the
    /// same either way.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub scoring_block: Option<String>,
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
    /// Output format: md (the columns that answer the question, within about 120 columns), md+
    /// (every column: KLD tails, Δp, ceiling, MBU, cost), csv, json [default: md].
    #[arg(short = 'o', long = "output", value_name = "FORMAT")]
    pub output: Option<String>,
    /// Draw speed against KL divergence as FILE.png or FILE.svg.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Replace an existing --plot file (a regular file only; a link is never written through).
    #[arg(long, requires = "plot")]
    pub force: bool,
    #[command(flatten)]
    pub runtime: RuntimeSweepFlags,
    #[command(flatten)]
    pub roofline: RooflineFlags,
    /// Quality only: skip the speed tests.
    #[arg(long)]
    pub no_speed: bool,
    /// A quality budget: the largest mean KL divergence to the reference (nats) you accept;
    /// the verdict names the fastest candidate within it (e.g. 0.05 keeps Q4_K_M-like loss).
    #[arg(long, value_name = "NATS", allow_hyphen_values = true)]
    pub max_kld: Option<String>,
    /// A quality budget: the smallest share (%) of positions whose most likely token is the
    /// reference's; the verdict names the fastest candidate within it.
    #[arg(long, value_name = "PCT", allow_hyphen_values = true)]
    pub min_same_top: Option<String>,
}

fn parse_count(flag: &str, value: &str, min: u32, max: u32) -> Result<u32, Failure> {
    match value.trim().parse::<u32>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(bad_value(
            flag,
            value,
            &format!("one whole number from {min} to {max}"),
        )),
    }
}

/// A number of the quality budget, in `[0, max]`.
fn parse_budget(flag: &str, value: &str, max: f64) -> Result<f64, Failure> {
    match value.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=max).contains(&v) => Ok(v),
        _ => Err(bad_value(flag, value, &format!("a number from 0 to {max}"))),
    }
}

/// `tokscope compare`.
pub(crate) fn run(args: &CompareArgs, settings: Settings) -> Result<(), Failure> {
    let plan = plan(args, &settings)?;
    crate::compare::run(&plan, settings).map_err(failure)
}

/// A comparison's error, with its exit code.
pub(crate) fn failure(e: CompareError) -> Failure {
    match e {
        CompareError::Usage(m) => Failure::usage(m),
        CompareError::Model(m) => Failure::new(MODEL, m),
        CompareError::Failed(m) => Failure::new(FAILURE, m),
    }
}

/// The command line, validated into a plan.
pub(crate) fn plan(args: &CompareArgs, settings: &Settings) -> Result<ComparePlan, Failure> {
    let quantize = args
        .quantize
        .iter()
        .flat_map(|q| q.split(','))
        .filter(|q| !q.trim().is_empty())
        .map(|q| QuantType::parse(q).map_err(|e| Failure::usage(format!("--quantize: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if !quantize.is_empty() && args.model.len() > 1 {
        return Err(Failure::usage(
            "--quantize takes one source model (-m), the high-precision file to quantize",
        ));
    }
    if let Some(r) = &args.reference {
        if !quantize.is_empty() {
            return Err(Failure::usage(
                "--reference goes with several -m files; with --quantize the source is the reference",
            ));
        }
        if !args.model.contains(r) {
            return Err(Failure::usage(format!(
                "--reference {}: not one of the -m files (give it with -m too)",
                r.display()
            )));
        }
    }
    let n_ctx = match &args.ctx_size {
        Some(v) => parse_count("-c/--ctx-size", v, 16, 1 << 16)?,
        None => 512,
    };
    let max_chunks = args
        .chunks
        .as_deref()
        .map(|v| parse_count("--chunks", v, 1, u32::MAX))
        .transpose()?;
    let micro_batch = n_ctx.min(crate::compare::SCORING_BLOCK);
    let scoring_block = match &args.scoring_block {
        Some(v) => {
            let n = parse_count("--scoring-block", v, 1, n_ctx)?;
            if n % micro_batch != 0 && n != n_ctx {
                return Err(bad_value(
                    "--scoring-block",
                    v,
                    &format!(
                        "a multiple of the micro-batch ({micro_batch}) or -c ({n_ctx}): blocks \
                         that cut a micro-batch would give other figures than one decode call"
                    ),
                ));
            }
            n
        }
        None => micro_batch,
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
        Some(o) if o == "md+" || o == "markdown+" => CompareFormat::MarkdownWide,
        Some(o) if o == "csv" => CompareFormat::Csv,
        Some(o) if o == "json" => CompareFormat::Json,
        Some(o) => return Err(bad_value("-o/--output", &o, "one of md, md+, csv, json")),
    };
    let plot = super::bench::plot_flag(args.plot.as_ref(), args.force, &[])?;
    let bench_args = BenchArgs {
        model: args.model.clone(),
        n_prompt: vec![args.n_prompt.clone().unwrap_or_else(|| "512".into())],
        n_gen: vec![args.n_gen.clone().unwrap_or_else(|| "128".into())],
        repetitions: Some(args.repetitions.clone().unwrap_or_else(|| "3".into())),
        threads: vec![threads.to_string()],
        runtime: args.runtime.clone(),
        roofline: args.roofline.clone(),
        ..BenchArgs::default()
    };
    let bench = super::bench::plan(&bench_args, settings)?;
    if bench.sweep.tests.is_empty() && !args.no_speed {
        return Err(Failure::usage(
            "-p and -n are both 0: no speed test to run (add --no-speed for quality only)",
        ));
    }
    let budget = crate::compare::Budget {
        max_kld: args
            .max_kld
            .as_deref()
            .map(|v| parse_budget("--max-kld", v, 100.0))
            .transpose()?,
        min_same_top_pct: args
            .min_same_top
            .as_deref()
            .map(|v| parse_budget("--min-same-top", v.trim_end_matches('%'), 100.0))
            .transpose()?,
    };
    Ok(ComparePlan {
        models: bench.models.clone(),
        quantize,
        reference: args.reference.clone(),
        allow_requantize: args.allow_requantize,
        text: args.text.clone(),
        n_ctx,
        max_chunks,
        scoring_block,
        threads,
        bench,
        output,
        plot,
        speed: !args.no_speed,
        budget,
    })
}
