//! `tokscope bench`'s command line: the clap definitions, the rewriting of llama-bench's
//! multi-letter short flags (`-ngl`, `-ctk`, …) that clap cannot express, and the parsing of
//! comma lists and ranges into a validated [`BenchPlan`]. Every bad value becomes a usage
//! error (exit 2) that names the flag and the value.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::{ArgAction, Args};

use super::flags::{RooflineFlags, RuntimeSweepFlags};
use crate::bench::plan::SpecPlan;
use crate::bench::plan::{BandwidthChoice, BenchPlan, OutputFormat};
use crate::bench::sweep::Sweep;
use crate::bench::vs_run::VsRunPlan;
use crate::bench::{format, log, report, run, save, sweep, StoredRun};
use crate::commands::{Failure, FAILURE};
use crate::config::Settings;
use crate::llama::measure::TestSpec;
use crate::llama::placement::{
    parse_device_sets, parse_main_gpu, parse_tensor_split, Placement, SplitMode,
};
use crate::llama::settings::{EngineSettings, FlashAttn, KvType};

/// llama.cpp keeps at most this many sequences in one context (`LLAMA_MAX_SEQ`).
pub(crate) const MAX_BATCH_SEQUENCES: u32 = 256;

/// llama-bench's multi-letter short flags and the long forms clap knows them by.
const LLAMA_BENCH_SHORT_FLAGS: &[(&str, &str)] = &[
    ("-pg", "--pg"),
    ("-ngl", "--n-gpu-layers"),
    ("-ub", "--ubatch-size"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-fa", "--flash-attn"),
    ("-sm", "--split-mode"),
    ("-ts", "--tensor-split"),
    ("-mg", "--main-gpu"),
    ("-dev", "--devices"),
];

/// Benchmark models like llama-bench: pp, tg and pg tests over a sweep of settings.
#[derive(Debug, Args, Default, Clone)]
pub struct BenchArgs {
    /// GGUF model file; repeat for several (default: config `model`, $TOKSCOPE_MODEL, then
    /// the demo model).
    #[arg(short = 'm', long, value_name = "FILE", action = ArgAction::Append)]
    pub model: Vec<PathBuf>,
    /// Prompt lengths of the pp tests, comma list or range (0 = no pp test) [default: 512].
    #[arg(short = 'p', long = "n-prompt", value_name = "N,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub n_prompt: Vec<String>,
    /// Generated tokens of the tg tests (0 = no tg test) [default: 128].
    #[arg(short = 'n', long = "n-gen", value_name = "N,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub n_gen: Vec<String>,
    /// Also run each tg test with the chat's sampler chain (the configured temperature,
    /// top-k, top-p, min-p, seed): a `tgN+sampling` row beside llama-bench's `tgN`, which
    /// feeds random tokens without sampling.
    #[arg(long = "tg-sampling")]
    pub tg_sampling: bool,
    /// Where `--tg-sampling` samples: host (`tgN+sampling`), backend (`tgN+backend`: the
    /// chain inside llama.cpp's graph), or auto (both, when the chain can run on the
    /// backend) [config: sampling.mode; default: auto].
    #[arg(long, value_name = "WHERE")]
    pub sampling: Option<String>,
    /// A prompt of PP tokens then TG generated, timed together (-pg); repeat for several.
    #[arg(long = "pg", value_name = "PP,TG", action = ArgAction::Append, allow_hyphen_values = true)]
    pub pg: Vec<String>,
    /// Tokens already in the KV cache when a pp, tg or pg test starts (filled untimed)
    /// [default: 0].
    #[arg(short = 'd', long = "n-depth", value_name = "N,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub n_depth: Vec<String>,
    /// Timed repetitions of each test, after one warm-up run [default: 5].
    #[arg(
        short = 'r',
        long = "repetitions",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub repetitions: Option<String>,
    /// CPU threads [default: all cores].
    #[arg(short = 't', long = "threads", value_name = "N,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub threads: Vec<String>,
    /// Logical batch: tokens per decode call [default: 2048].
    #[arg(short = 'b', long = "batch-size", value_name = "N,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub n_batch: Vec<String>,
    /// Physical batch: tokens per graph evaluation (-ub) [default: 512].
    #[arg(long = "ubatch-size", value_name = "N,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub n_ubatch: Vec<String>,
    /// Also decode B sequences together, for each B (like llama-batched-bench's -npl).
    #[arg(long = "batch", value_name = "B,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub batch: Vec<String>,
    /// How layers are spread over several GPUs: none, layer or row (llama-bench's -sm).
    #[arg(long = "split-mode", value_name = "MODE")]
    pub split_mode: Option<String>,
    /// Proportions of the model per GPU, like 3/1 (llama-bench's -ts). Not passable through
    /// the llama-cpp-2 0.1.160 bindings: given, it is refused with a clear error.
    #[arg(long = "tensor-split", value_name = "A/B/…")]
    pub tensor_split: Option<String>,
    /// The GPU that holds the whole model with --split-mode none (llama-bench's -mg).
    #[arg(long = "main-gpu", value_name = "N", allow_hyphen_values = true)]
    pub main_gpu: Option<String>,
    /// Device sets to measure, one row each: CUDA0/CUDA1,CUDA0 or none (llama-bench's -dev).
    #[arg(long = "devices", value_name = "DEV/…,…", action = ArgAction::Append)]
    pub devices: Vec<String>,
    /// Output format: md (llama-bench's columns, within 120), md+ (every column: TTFT, ITL, the
    /// roofline, cost), csv, json, jsonl [default: md].
    #[arg(short = 'o', long = "output", value_name = "FORMAT")]
    pub output: Option<String>,
    /// Skip the warm-up run before each test.
    #[arg(long)]
    pub no_warmup: bool,
    #[command(flatten)]
    pub runtime: RuntimeSweepFlags,
    #[command(flatten)]
    pub roofline: RooflineFlags,
    /// Compare with an earlier run of the results log: `last` (the last run of the same model
    /// and tests; bench says so when there is none) or its id (or a unique prefix).
    /// With --spec/--draft: an earlier speculative sweep, k by k (tok/s, speed-up and
    /// acceptance before → now, the settings that differ); `last` is the last sweep.
    #[arg(long = "vs", value_name = "last|ID")]
    pub vs: Option<String>,
    /// Draw charts as files: FILE.png or FILE.svg. Writes FILE-roofline (tok/s against bytes
    /// per token under the bandwidth ceiling) and, with --batch, FILE-batch (tok/s and ITL
    /// against B).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    pub profile: super::profile::ProfileArgs,
    #[command(flatten)]
    pub trace: super::profile::TraceArgs,
    #[command(flatten)]
    pub spec: SpecBenchFlags,
    /// Measure `run`'s decode (the engine's sampler, detokenizer and events, at `run`'s
    /// context size: config `context`, or CTX) against llama-bench's tg on the same file, in
    /// alternating rounds on the engine's thread (-r rounds, default 10; -n tokens; one -t):
    /// run ÷ tg per round, its median and spread, judged against 0.97. Greedy; with
    /// --tg-sampling the configured sampler chain too.
    #[arg(long = "run-vs-tg", value_name = "CTX", num_args = 0..=1, default_missing_value = "")]
    pub run_vs_tg: Option<String>,
}

/// `bench --spec ngram | --draft FILE`: the speculative decoding sweep (`bench::spec`).
#[derive(Debug, Args, Default, Clone)]
pub struct SpecBenchFlags {
    /// Measure speculative decoding with prompt lookup (`ngram`): a --draft-max sweep against
    /// no speculation, in alternating rounds (-r rounds, -n tokens, one -t). The Markdown
    /// output charts speed-up and acceptance against k under the table; --plot FILE also
    /// writes FILE-spec; --vs last|ID compares with an earlier sweep, k by k.
    #[arg(long = "spec", value_name = "MODE")]
    pub spec: Option<String>,
    /// Measure speculative decoding with this draft model (the target's vocabulary).
    #[arg(long = "draft", value_name = "FILE")]
    pub draft: Option<PathBuf>,
    /// The k values of the sweep, tokens drafted per step (0 = no speculation: the baseline,
    /// always measured) [default: 0,2,4,8].
    #[arg(long = "draft-max", value_name = "K,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub draft_max: Vec<String>,
    /// The prompt every k answers (greedy, exactly -n tokens), from a file [default: a
    /// built-in copy-heavy prompt: a function to write again under another name].
    #[arg(long = "spec-prompt", value_name = "FILE")]
    pub spec_prompt: Option<PathBuf>,
    /// Length of the n-gram looked up by --spec ngram [default: config `spec.ngram_n`, 3].
    #[arg(long = "ngram-n", value_name = "N", allow_hyphen_values = true)]
    pub ngram_n: Option<String>,
    /// Batch-invariant CPU kernels for every k, k = 0 too (`auto` = on; `off`: llama.cpp's
    /// default kernels, whose verify rows may part from plain decoding at near ties)
    /// [default: config `spec.batch_invariant`, auto].
    #[arg(long = "batch-invariant", value_name = "auto|on|off")]
    pub batch_invariant: Option<String>,
}

impl SpecBenchFlags {
    fn given(&self) -> bool {
        self.spec.is_some()
            || self.draft.is_some()
            || !self.draft_max.is_empty()
            || self.spec_prompt.is_some()
            || self.ngram_n.is_some()
            || self.batch_invariant.is_some()
    }
}

/// Rewrite llama-bench's multi-letter short flags to their long forms, only in the arguments
/// of the `bench` and `compare` subcommands (clap has no multi-letter short flags; other
/// commands keep theirs).
pub fn rewrite_llama_bench_flags<I: IntoIterator<Item = OsString>>(args: I) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let Some(start) = bench_subcommand_index(&args) else {
        return args;
    };
    for arg in args.iter_mut().skip(start + 1) {
        let Some(text) = arg.to_str() else { continue };
        if text == "--" {
            break;
        }
        if let Some(long) = long_form(text) {
            *arg = OsString::from(long);
        }
    }
    args
}

/// Where the subcommand is when it is `bench` or `compare`: the first argument that is not a
/// global option.
fn bench_subcommand_index(args: &[OsString]) -> Option<usize> {
    let mut i = 1;
    while let Some(arg) = args.get(i) {
        let text = arg.to_str()?;
        if text == "--config" {
            i += 2;
        } else if text.starts_with("--config=") {
            i += 1;
        } else {
            return matches!(text, "bench" | "compare").then_some(i);
        }
    }
    None
}

fn long_form(text: &str) -> Option<String> {
    let (flag, value) = match text.split_once('=') {
        Some((flag, value)) => (flag, Some(value)),
        None => (text, None),
    };
    let (_, long) = LLAMA_BENCH_SHORT_FLAGS.iter().find(|(s, _)| *s == flag)?;
    Some(match value {
        Some(v) => format!("{long}={v}"),
        None => (*long).to_string(),
    })
}

pub(crate) fn bad_value(flag: &str, value: &str, expected: &str) -> Failure {
    Failure::usage(format!("invalid value `{value}` for {flag}: {expected}"))
}

/// Integers from comma lists and llama-bench ranges (`first-last`, `first-last+step`,
/// `first-last*factor`), every value in `min..=max`.
pub(crate) fn parse_int_list(
    flag: &str,
    given: &[String],
    min: i64,
    max: i64,
) -> Result<Vec<i64>, Failure> {
    let mut values = Vec::new();
    for item in given.iter().flat_map(|g| g.split(',')) {
        let expected =
            format!("a whole number from {min} to {max}, a comma list or a range like 1-8*2");
        let range = parse_range(item.trim()).ok_or_else(|| bad_value(flag, item, &expected))?;
        for v in range {
            if v < min || v > max {
                return Err(bad_value(
                    flag,
                    item,
                    &format!("each value must be from {min} to {max}"),
                ));
            }
            values.push(v);
        }
    }
    Ok(values)
}

/// `N`, `A-B`, `A-B+S` or `A-B*F` (a leading `-` is a negative number, for `-ngl -1`).
fn parse_range(item: &str) -> Option<Vec<i64>> {
    if let Ok(v) = item.parse::<i64>() {
        return Some(vec![v]);
    }
    let (first, rest) = item.split_at(item.get(1..)?.find('-')? + 1);
    let first: i64 = first.parse().ok()?;
    let rest = &rest[1..];
    let (last, op, step) = match rest.find(['+', '*']) {
        Some(at) => (
            &rest[..at],
            &rest[at..at + 1],
            rest[at + 1..].parse::<i64>().ok()?,
        ),
        None => (rest, "+", 1),
    };
    let last: i64 = last.parse().ok()?;
    let mut values = Vec::new();
    let mut v = first;
    while v <= last {
        values.push(v);
        let next = if op == "+" {
            v.checked_add(step)?
        } else {
            v.checked_mul(step)?
        };
        if next <= v || values.len() > 4096 {
            return None;
        }
        v = next;
    }
    (!values.is_empty()).then_some(values)
}

fn parse_u32_list(
    flag: &str,
    given: &[String],
    default: u32,
    min: i64,
    max: i64,
) -> Result<Vec<u32>, Failure> {
    if given.is_empty() {
        return Ok(vec![default]);
    }
    let values = parse_int_list(flag, given, min, max)?;
    Ok(values
        .into_iter()
        .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
        .collect())
}

/// One whole number (flags that do not sweep).
fn parse_single(flag: &str, given: &str, min: i64, max: i64) -> Result<u32, Failure> {
    match parse_int_list(flag, &[given.to_string()], min, max)?.as_slice() {
        [one] => Ok(u32::try_from(*one).unwrap_or(u32::MAX)),
        _ => Err(bad_value(flag, given, "one whole number, not a list")),
    }
}

fn parse_named_list<T: std::str::FromStr<Err = String>>(
    flag: &str,
    given: &[String],
    default: T,
) -> Result<Vec<T>, Failure> {
    if given.is_empty() {
        return Ok(vec![default]);
    }
    given
        .iter()
        .flat_map(|g| g.split(','))
        .map(|item| {
            item.parse::<T>()
                .map_err(|reason| bad_value(flag, item, &reason))
        })
        .collect()
}

fn parse_positive(flag: &str, value: &str) -> Result<f64, Failure> {
    match value.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(bad_value(flag, value, "a number greater than 0")),
    }
}

/// `-pg PP,TG` pairs; each occurrence is one pair, as in llama-bench.
fn parse_pg(given: &[String]) -> Result<Vec<TestSpec>, Failure> {
    given
        .iter()
        .map(|pair| {
            let parsed = pair.split_once(',').and_then(|(p, n)| {
                Some((p.trim().parse::<u32>().ok()?, n.trim().parse::<u32>().ok()?))
            });
            match parsed {
                Some((p, n)) if p > 0 || n > 0 => Ok(TestSpec::Pg {
                    n_prompt: p,
                    n_gen: n,
                }),
                _ => Err(bad_value(
                    "-pg/--pg",
                    pair,
                    "PP,TG: two whole numbers, not both 0",
                )),
            }
        })
        .collect()
}

/// `-r/--repetitions`, else `default`.
fn repetitions(args: &BenchArgs, default: u32) -> Result<u32, Failure> {
    args.repetitions.as_deref().map_or(Ok(default), |r| {
        parse_single("-r/--repetitions", r, 1, 100_000)
    })
}

/// `-o/--output`, else Markdown.
fn output_flag(args: &BenchArgs) -> Result<OutputFormat, Failure> {
    args.output
        .as_deref()
        .map_or(Ok(OutputFormat::Markdown), parse_output)
}

/// `-o/--output`.
fn parse_output(s: &str) -> Result<OutputFormat, Failure> {
    match s.trim().to_ascii_lowercase().as_str() {
        "md" | "markdown" => Ok(OutputFormat::Markdown),
        "md+" | "markdown+" => Ok(OutputFormat::MarkdownWide),
        "csv" => Ok(OutputFormat::Csv),
        "json" => Ok(OutputFormat::Json),
        "jsonl" => Ok(OutputFormat::JsonLines),
        _ => Err(bad_value(
            "-o/--output",
            s,
            "one of md, md+, csv, json, jsonl",
        )),
    }
}

/// Validate the flags against the lower configuration layers.
pub(crate) fn plan(args: &BenchArgs, settings: &Settings) -> Result<BenchPlan, Failure> {
    let sweep = parse_sweep(args, settings)?;
    let repetitions = repetitions(args, 5)?;
    let bandwidth = match (&args.roofline.bandwidth_gb_s, settings.bandwidth_gb_s) {
        (Some(v), _) => {
            let gb_s = parse_positive("--bandwidth-gb-s", v)?;
            crate::metrics::roofline::check_bandwidth_gb_s(gb_s)
                .map_err(|why| bad_value("--bandwidth-gb-s", v, &why))?;
            BandwidthChoice::Configured(gb_s * 1e9)
        }
        (None, Some(v)) => BandwidthChoice::Configured(v * 1e9),
        (None, None) => BandwidthChoice::Auto {
            probe: !args.roofline.no_probe,
        },
    };
    let price_per_gpu_hour_usd = match &args.roofline.price {
        Some(v) => parse_positive("--price", v)?,
        None => settings.price_per_gpu_hour_usd,
    };
    let output = output_flag(args)?;
    let models = if args.model.is_empty() {
        vec![crate::commands::model::resolve_model(settings)?]
    } else {
        args.model
            .iter()
            .map(|m| crate::config::expand_home(m))
            .collect()
    };
    Ok(BenchPlan {
        models,
        sweep,
        repetitions,
        warmup: !args.no_warmup,
        output,
        bandwidth,
        price_per_gpu_hour_usd,
        price_per_kwh: settings.price_per_kwh,
        vs: args.vs.clone(),
        profile_rate: args.profile.rate(),
        profile_level: args.profile.profile.unwrap_or_default(),
        trace: args.trace.trace.is_some(),
        plot: plot_flag(
            args.plot.as_ref(),
            args.trace.force,
            &crate::bench::plots::SWEEP_CHARTS,
        )?,
    })
}

/// Which sampled tg rows `--tg-sampling` adds: (host, backend).
fn sampled_rows(args: &BenchArgs, settings: &Settings) -> Result<(bool, bool), Failure> {
    use crate::llama::settings::SamplingMode;
    let mode = match &args.sampling {
        Some(v) => v
            .parse::<SamplingMode>()
            .map_err(|reason| Failure::usage(format!("--sampling: {reason}")))?,
        None => settings.engine.sampling,
    };
    if !args.tg_sampling {
        return Ok((false, false));
    }
    // Auto's backend row needs the output layer on a GPU: a device, and any layer offloaded
    // (llama.cpp offloads the output layer first, `LayerSplit`).
    let cx = crate::llama::sampler::PlaceContext {
        output_on_gpu: !crate::llama::gpu_devices().is_empty()
            && crate::llama::requested_gpu_layers(settings.engine.n_gpu_layers) >= 1,
        ..Default::default()
    };
    let place = crate::llama::sampler::choose_place(mode, &settings.sampling, cx)
        .map_err(|e| Failure::usage(e.to_string()))?;
    Ok(match mode {
        SamplingMode::Host => (true, false),
        SamplingMode::Backend => (false, true),
        SamplingMode::Auto => (true, place.backend),
    })
}

fn parse_sweep(args: &BenchArgs, settings: &Settings) -> Result<Sweep, Failure> {
    let (host_rows, backend_rows) = sampled_rows(args, settings)?;
    let n_prompt = parse_u32_list("-p/--n-prompt", &args.n_prompt, 512, 0, 1 << 20)?;
    let n_gen = parse_u32_list("-n/--n-gen", &args.n_gen, 128, 0, 1 << 20)?;
    let mut tests: Vec<TestSpec> = n_prompt
        .iter()
        .filter(|p| **p > 0)
        .map(|p| TestSpec::Pp { n_prompt: *p })
        .collect();
    for n in n_gen.iter().filter(|n| **n > 0) {
        tests.push(TestSpec::Tg { n_gen: *n });
        if host_rows {
            tests.push(TestSpec::TgSampled { n_gen: *n });
        }
        if backend_rows {
            tests.push(TestSpec::TgBackend { n_gen: *n });
        }
    }
    tests.extend(parse_pg(&args.pg)?);
    let batch_sizes: Vec<u32> =
        parse_int_list("--batch", &args.batch, 1, i64::from(MAX_BATCH_SEQUENCES))?
            .into_iter()
            .filter_map(|b| u32::try_from(b).ok())
            .collect();
    let batch_tests = batch_tests(&n_prompt, &n_gen, &batch_sizes)?;
    if tests.is_empty() && batch_tests.is_empty() {
        return Err(Failure::usage(
            "nothing to measure: every -p and -n is 0 and there is no -pg or --batch",
        ));
    }
    let sweep = Sweep {
        n_gpu_layers: parse_int_list(
            "-ngl/--n-gpu-layers",
            &args.runtime.n_gpu_layers,
            -1,
            100_000,
        )
        .map(|v| if v.is_empty() { vec![-1] } else { v })?,
        n_batch: parse_u32_list("-b/--batch-size", &args.n_batch, 2048, 1, 1 << 20)?,
        n_ubatch: parse_u32_list("-ub/--ubatch-size", &args.n_ubatch, 512, 1, 1 << 20)?,
        type_k: parse_named_list::<KvType>(
            "-ctk/--cache-type-k",
            &args.runtime.cache_type_k,
            KvType::F16,
        )?,
        type_v: parse_named_list::<KvType>(
            "-ctv/--cache-type-v",
            &args.runtime.cache_type_v,
            KvType::F16,
        )?,
        flash_attn: parse_named_list::<FlashAttn>(
            "-fa/--flash-attn",
            &args.runtime.flash_attn,
            FlashAttn::Auto,
        )?,
        threads: parse_u32_list(
            "-t/--threads",
            &args.threads,
            crate::llama::settings::default_threads(),
            1,
            1024,
        )?,
        n_depth: parse_u32_list("-d/--n-depth", &args.n_depth, 0, 0, 1 << 24)?,
        placements: parse_placements(args)?,
        tests,
        batch_tests,
    };
    check_batch_fits(&sweep)?;
    Ok(sweep)
}

/// One placement per device set (`--devices`), each with the split mode, main GPU and tensor
/// split; none (llama.cpp's defaults) when no placement flag is given.
fn parse_placements(args: &BenchArgs) -> Result<Vec<Placement>, Failure> {
    fn given<T>(
        v: &Option<String>,
        parse: fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, Failure> {
        v.as_deref().map(parse).transpose().map_err(Failure::usage)
    }
    let split_mode = given(&args.split_mode, SplitMode::parse)?;
    let main_gpu = given(&args.main_gpu, parse_main_gpu)?;
    let tensor_split = given(&args.tensor_split, parse_tensor_split)?;
    let device_sets = parse_device_sets(&args.devices).map_err(Failure::usage)?;
    if let (Some(ts), Some(longest)) = (&tensor_split, device_sets.iter().map(Vec::len).max()) {
        if ts.len() > longest.max(1) {
            return Err(Failure::usage(format!(
                "--tensor-split has {} values but the largest --devices set has {longest} devices",
                ts.len()
            )));
        }
    }
    let base = Placement {
        split_mode,
        main_gpu,
        devices: None,
        tensor_split,
    };
    if device_sets.is_empty() {
        // llama.cpp's defaults are no placement at all.
        return Ok((base != Placement::default())
            .then_some(base)
            .into_iter()
            .collect());
    }
    Ok(device_sets
        .into_iter()
        .map(|d| Placement {
            devices: Some(d),
            ..base.clone()
        })
        .collect())
}

/// One batch test per prompt length, generation length (> 0) and batch size.
fn batch_tests(
    n_prompt: &[u32],
    n_gen: &[u32],
    batch_sizes: &[u32],
) -> Result<Vec<TestSpec>, Failure> {
    if batch_sizes.is_empty() {
        return Ok(Vec::new());
    }
    if n_gen.iter().all(|n| *n == 0) {
        return Err(Failure::usage(
            "--batch needs tokens to generate: give -n a value above 0",
        ));
    }
    let mut tests = Vec::new();
    for p in n_prompt {
        for n in n_gen.iter().filter(|n| **n > 0) {
            for b in batch_sizes {
                tests.push(TestSpec::Batch {
                    sequences: *b,
                    n_prompt: *p,
                    n_gen: *n,
                });
            }
        }
    }
    Ok(tests)
}

/// Each generation step of a batch test is one decode call of B tokens, so B must fit -b.
fn check_batch_fits(sweep: &Sweep) -> Result<(), Failure> {
    let largest = sweep
        .batch_tests
        .iter()
        .filter_map(|t| match t {
            TestSpec::Batch { sequences, .. } => Some(*sequences),
            _ => None,
        })
        .max();
    let smallest_n_batch = sweep.n_batch.iter().min().copied().unwrap_or(1);
    match largest {
        Some(b) if b > smallest_n_batch => Err(Failure::usage(format!("invalid value `{b}` for --batch: a generation step decodes {b} tokens at once, more than -b/--batch-size {smallest_n_batch}"),
        )),
        _ => Ok(()),
    }
}

/// The speculative sweep's plan: one target, `--spec ngram` or `--draft FILE` (not both),
/// the k list with 0 first, one thread count and token count, the prompt.
pub(crate) fn spec_plan(args: &BenchArgs, settings: &Settings) -> Result<SpecPlan, Failure> {
    let f = &args.spec;
    let (mode, draft) = spec_mode(f)?;
    let why = "the sweep decodes --spec-prompt greedily for -n tokens";
    if args.tg_sampling {
        return Err(Failure::usage(format!(
            "--tg-sampling does not apply to --spec/--draft ({why})"
        )));
    }
    refuse_sweep_flags(args, "--spec/--draft", why)?;
    let ks = draft_maxes(f)?;
    let shape = shape(args, "--spec/--draft", 5)?;
    let ngram_n = match &f.ngram_n {
        Some(n) => parse_single("--ngram-n", n, 1, 64)?,
        None => settings.engine.spec.ngram_n,
    };
    let batch_invariant = spec_batch_invariant(f, settings)?;
    let plot = plot_flag(
        args.plot.as_ref(),
        args.trace.force,
        &crate::bench::plots::SPEC_CHARTS,
    )?;
    let model = one_model(args, settings, "--spec/--draft")?;
    run::check_models(std::slice::from_ref(&model))?;
    if let Some(d) = &draft {
        crate::engine::check_model_file(d)
            .map_err(|e| Failure::of(e.is_model_problem(), format!("--draft: {e}")))?;
    }
    let (prompt, prompt_source) = spec_prompt(f)?;
    let engine = crate::bench::spec::sweep_engine(
        &settings.engine,
        batch_invariant,
        shape.threads,
        shape.n_gen,
    );
    let kernel_baseline = engine.spec.batch_invariant_kernels();
    Ok(SpecPlan {
        model,
        mode,
        draft,
        draft_max: ks,
        ngram_n,
        n_gen: shape.n_gen,
        rounds: shape.rounds,
        warmup: !args.no_warmup,
        messages: crate::commands::model::single_turn(settings, &prompt),
        prompt_source,
        engine,
        output: shape.output,
        plot,
        vs: args.vs.clone(),
        kernel_baseline,
    })
}

/// What the sweep speculates with: `--spec ngram` (prompt lookup) or `--draft FILE` (a
/// draft model, its path expanded), exactly one of them.
fn spec_mode(
    f: &SpecBenchFlags,
) -> Result<(crate::llama::settings::SpecMode, Option<PathBuf>), Failure> {
    use crate::llama::settings::SpecMode;
    Ok(match (&f.spec, &f.draft) {
        (Some(_), Some(_)) => {
            return Err(Failure::usage("--spec and --draft were both given: use --spec ngram for prompt lookup or --draft FILE for a draft model, not both",
            ))
        }
        (Some(m), None) => match m.trim().to_ascii_lowercase().as_str() {
            "ngram" | "lookup" => (SpecMode::Ngram, None),
            _ => {
                return Err(bad_value(
                    "--spec",
                    m,
                    "ngram (a draft model is --draft FILE)",
                ))
            }
        },
        (None, Some(d)) => (SpecMode::Draft, Some(crate::config::expand_home(d))),
        (None, None) => {
            return Err(Failure::usage("--draft-max, --spec-prompt and --ngram-n measure speculative decoding: add --spec ngram or --draft FILE",
            ))
        }
    })
}

/// `--draft-max`'s k values (0,2,4,8 when not given), sorted, each once, 0 (the baseline)
/// always among them with at least one k above it.
fn draft_maxes(f: &SpecBenchFlags) -> Result<Vec<u32>, Failure> {
    let mut ks: Vec<u32> = if f.draft_max.is_empty() {
        vec![0, 2, 4, 8]
    } else {
        parse_int_list("--draft-max", &f.draft_max, 0, 256)?
            .into_iter()
            .filter_map(|k| u32::try_from(k).ok())
            .collect()
    };
    ks.push(0);
    ks.sort_unstable();
    ks.dedup();
    if ks.len() < 2 {
        return Err(Failure::usage(
            "--draft-max 0 alone measures nothing to compare: add values above 0, like 0,2,4,8",
        ));
    }
    Ok(ks)
}

/// `--batch-invariant` (`auto` is `None`), else the configured `spec.batch_invariant`.
fn spec_batch_invariant(f: &SpecBenchFlags, settings: &Settings) -> Result<Option<bool>, Failure> {
    match &f.batch_invariant {
        Some(v) => crate::config::parse_batch_invariant(v).ok_or_else(|| {
            Failure::usage(format!(
                "invalid value `{v}` for --batch-invariant: use auto, on or off"
            ))
        }),
        None => Ok(settings.engine.spec.batch_invariant),
    }
}

/// `--plot FILE`, its extension checked, and the files it will write (`FILE-suffix.ext` for
/// each of `charts`, or FILE itself when there are none) checked as every output is (a folder
/// that exists, no link or FIFO, an existing file only with --force), so that a bad path fails
/// before anything is measured.
pub(crate) fn plot_flag(
    plot: Option<&PathBuf>,
    force: bool,
    charts: &[&str],
) -> Result<Option<crate::fsx::Output>, Failure> {
    let Some(p) = plot else {
        return Ok(None);
    };
    crate::plot::plot_file_kind(p).map_err(|e| Failure::usage(format!("--plot: {e}")))?;
    let out = crate::fsx::Output::new(p, force);
    let files = match charts {
        [] => vec![out.clone()],
        _ => charts.iter().map(|c| out.derived(c)).collect(),
    };
    for file in files {
        file.check()
            .map_err(|e| Failure::usage(format!("--plot: {e}")))?;
    }
    Ok(Some(out))
}

/// The prompt every k answers and where it came from: `--spec-prompt FILE` (readable, not
/// blank), else the built-in copy-heavy prompt.
fn spec_prompt(f: &SpecBenchFlags) -> Result<(String, String), Failure> {
    let Some(path) = &f.spec_prompt else {
        return Ok((
            crate::bench::spec::DEFAULT_SPEC_PROMPT.to_string(),
            "built-in copy-heavy prompt".to_string(),
        ));
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::usage(format!("cannot read --spec-prompt {}: {e}", path.display()))
    })?;
    if text.trim().is_empty() {
        return Err(Failure::usage(format!(
            "--spec-prompt {} is empty",
            path.display()
        )));
    }
    Ok((text, crate::bench::sweep::file_name(path)))
}

/// The one-model measurements' shape (`--spec/--draft`, `--run-vs-tg`): one -n, one -t, -r
/// rounds (default `rounds`), the output format.
struct Shape {
    n_gen: u32,
    threads: u32,
    rounds: u32,
    output: OutputFormat,
}

fn shape(args: &BenchArgs, what: &str, rounds: u32) -> Result<Shape, Failure> {
    let one = |flag: &str, given: &[String], default: u32, min: i64, max: i64| match parse_u32_list(
        flag, given, default, min, max,
    )?
    .as_slice()
    {
        [v] => Ok(*v),
        _ => Err(bad_value(
            flag,
            &given.join(","),
            &format!("one value with {what}"),
        )),
    };
    Ok(Shape {
        n_gen: one("-n/--n-gen", &args.n_gen, 128, 1, 1 << 16)?,
        threads: one(
            "-t/--threads",
            &args.threads,
            crate::llama::settings::default_threads(),
            1,
            1024,
        )?,
        rounds: repetitions(args, rounds)?,
        output: output_flag(args)?,
    })
}

/// The one model a `--spec/--draft` or `--run-vs-tg` measurement takes (-m once, or the
/// configured one), checked.
fn one_model(args: &BenchArgs, settings: &Settings, what: &str) -> Result<PathBuf, Failure> {
    let model = match args.model.as_slice() {
        [] => crate::commands::model::resolve_model(settings)?,
        [m] => crate::config::expand_home(m),
        _ => {
            return Err(Failure::usage(format!(
                "{what} measure one model: give -m once"
            )))
        }
    };
    run::check_models(std::slice::from_ref(&model))?;
    Ok(model)
}

/// Flags that do not apply to a one-model measurement (`what`), refused by name.
fn refuse_sweep_flags(args: &BenchArgs, what: &str, why: &str) -> Result<(), Failure> {
    for (given, flag) in [
        (!args.n_prompt.is_empty(), "-p/--n-prompt"),
        (!args.pg.is_empty(), "-pg/--pg"),
        (!args.batch.is_empty(), "--batch"),
        (!args.n_depth.is_empty(), "-d/--n-depth"),
    ] {
        if given {
            return Err(Failure::usage(format!(
                "{flag} does not apply to {what} ({why})"
            )));
        }
    }
    Ok(())
}

/// `--run-vs-tg`'s plan: one model, the engine's context (the configured one when none is
/// given), greedy and, with --tg-sampling, the configured chain.
pub(crate) fn vs_run_plan(args: &BenchArgs, settings: &Settings) -> Result<VsRunPlan, Failure> {
    let given = args.run_vs_tg.as_deref().unwrap_or_default();
    if args.spec.given() {
        return Err(Failure::usage(
            "--run-vs-tg and --spec/--draft are separate measurements: give one",
        ));
    }
    let why = "it times -n generated tokens of run against tg";
    refuse_sweep_flags(args, "--run-vs-tg", why)?;
    if args.vs.is_some() {
        return Err(Failure::usage(format!(
            "--vs does not apply to --run-vs-tg ({why})"
        )));
    }
    if args.plot.is_some() {
        return Err(Failure::usage("--plot does not apply to --run-vs-tg"));
    }
    let shape = shape(args, "--run-vs-tg", 10)?;
    if shape.output == OutputFormat::Csv {
        return Err(bad_value(
            "-o/--output",
            "csv",
            "md, json or jsonl with --run-vs-tg",
        ));
    }
    let n_ctx = if given.trim().is_empty() {
        settings.engine.n_ctx
    } else {
        parse_single("--run-vs-tg", given, 16, 1 << 24)?
    };
    let model = one_model(args, settings, "--run-vs-tg")?;
    let mut samplings = vec![crate::bench::spec::greedy()];
    if args.tg_sampling && settings.sampling.temperature > 0.0 {
        samplings.push(settings.sampling.clone());
    }
    let mut engine = settings.engine.clone();
    engine.threads = shape.threads;
    vs_run_runtime(args, &mut engine)?;
    Ok(VsRunPlan {
        model,
        engine,
        n_ctx,
        samplings,
        n_gen: shape.n_gen,
        rounds: shape.rounds,
        warmup: !args.no_warmup,
        messages: crate::commands::model::single_turn(settings, crate::bench::vs_run::PROMPT),
        output: shape.output,
    })
}

/// `--run-vs-tg` with bench's runtime flags: one value each (-ngl, -ctk, -ctv, -fa, -b, -ub),
/// for both lanes, over the configured engine settings.
fn vs_run_runtime(args: &BenchArgs, engine: &mut EngineSettings) -> Result<(), Failure> {
    /// The flag's one value, parsed by `parse`; `None` when it was not given.
    fn one<T>(
        flag: &str,
        given: &[String],
        parse: impl FnOnce(&str, &[String]) -> Result<Vec<T>, Failure>,
    ) -> Result<Option<T>, Failure> {
        if given.is_empty() {
            return Ok(None);
        }
        let mut values = parse(flag, given)?;
        match values.len() {
            1 => Ok(values.pop()),
            _ => Err(bad_value(
                flag,
                &given.join(","),
                "one value with --run-vs-tg",
            )),
        }
    }
    let r = &args.runtime;
    if let Some(n) = one("-ngl/--n-gpu-layers", &r.n_gpu_layers, |f, g| {
        parse_int_list(f, g, -1, 100_000)
    })? {
        engine.n_gpu_layers = u32::try_from(n).ok();
    }
    let kv = |f: &str, g: &[String]| parse_named_list::<KvType>(f, g, KvType::F16);
    if let Some(t) = one("-ctk/--cache-type-k", &r.cache_type_k, kv)? {
        engine.type_k = t;
    }
    if let Some(t) = one("-ctv/--cache-type-v", &r.cache_type_v, kv)? {
        engine.type_v = t;
    }
    let fa = |f: &str, g: &[String]| parse_named_list::<FlashAttn>(f, g, FlashAttn::Auto);
    if let Some(v) = one("-fa/--flash-attn", &r.flash_attn, fa)? {
        engine.flash_attn = v;
    }
    let size = |f: &str, g: &[String]| parse_u32_list(f, g, 1, 1, 1 << 20);
    if let Some(b) = one("-b/--batch-size", &args.n_batch, size)? {
        engine.n_batch = b;
    }
    if let Some(b) = one("-ub/--ubatch-size", &args.n_ubatch, size)? {
        engine.n_ubatch = b;
    }
    Ok(())
}

/// The results on stdout, in the output's format.
fn print_results(
    text: Result<String, impl std::fmt::Display>,
    output: OutputFormat,
) -> Result<(), Failure> {
    let text =
        text.map_err(|e| Failure::new(FAILURE, format!("cannot format the results: {e}")))?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(crate::text::for_stdout(&text, output.shape()).as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// Text for a person after the results (a `--vs` comparison, a verdict): on stdout under a
/// Markdown table, on stderr when stdout carries CSV or JSON, which stays machine-readable.
fn print_for_a_person(text: &str, output: OutputFormat) -> Result<(), Failure> {
    if output.is_markdown() {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(crate::text::for_stdout(text, crate::text::Shape::Human).as_bytes())?;
        stdout.flush()?;
    } else {
        eprint!("{}", crate::text::terminal_safe(text));
    }
    Ok(())
}

/// `tokscope bench --run-vs-tg`.
fn run_vs_tg(args: &BenchArgs, settings: &Settings) -> Result<(), Failure> {
    let plan = vs_run_plan(args, settings)?;
    let now = std::time::SystemTime::now();
    let run_id = crate::ids::new_id(now);
    let outcome = crate::bench::vs_run::run(&plan, &run_id)
        .map_err(|e| Failure::of(e.is_model_problem(), format!("bench --run-vs-tg: {e}")))?;
    print_results(
        crate::bench::vs_run::render(&outcome, plan.output),
        plan.output,
    )?;
    if !plan.output.is_markdown() {
        for line in outcome
            .rows
            .iter()
            .filter_map(crate::bench::vs_run::verdict_line)
        {
            eprintln!("{}", crate::text::terminal_safe(&line));
        }
    }
    let log_path = log::results_path(&crate::paths::data_dir());
    save(&log_path, &run_id, crate::ids::unix_s(now), &outcome.rows);
    Ok(())
}

/// `tokscope bench --spec ngram | --draft FILE`.
fn run_spec(args: &BenchArgs, settings: &Settings) -> Result<(), Failure> {
    let plan = spec_plan(args, settings)?;
    let log_path = log::results_path(&crate::paths::data_dir());
    let baseline = baseline(&log_path, plan.vs.as_deref(), log::find_spec_sweep)?;
    // The warnings `run` gives for a setup that cannot pay (a draft not smaller than the
    // target), for the largest k; the sweep decodes greedily.
    let mut spec_settings = settings.clone();
    spec_settings.engine.spec.mode = plan.mode;
    spec_settings.engine.spec.draft_model = plan.draft.clone();
    spec_settings.engine.spec.draft_max = plan.draft_max.iter().copied().max().unwrap_or(0);
    spec_settings.engine.spec.batch_invariant = plan.engine.spec.batch_invariant;
    spec_settings.sampling = crate::bench::spec::greedy();
    for w in crate::commands::run::spec_warnings(&spec_settings, &plan.model) {
        eprintln!("warning: {}", crate::text::terminal_safe(&w));
    }
    let now = std::time::SystemTime::now();
    let run_id = crate::ids::new_id(now);
    let outcome = crate::bench::spec::run(&plan, &run_id)
        .map_err(|e| Failure::of(e.is_model_problem(), format!("bench --spec: {e}")))?;
    print_results(
        crate::bench::spec::render(&outcome, plan.output),
        plan.output,
    )?;
    if !plan.output.is_markdown() {
        eprintln!("{}", crate::text::terminal_safe(&outcome.verdict));
    }
    if !outcome.rows.is_empty() {
        save(&log_path, &run_id, crate::ids::unix_s(now), &outcome.rows);
    }
    if let Some(path) = &plan.plot {
        let out = crate::bench::plots::write_spec(&outcome.rows, path)
            .map_err(|e| Failure::new(FAILURE, format!("--plot: {e}")))?;
        eprintln!("wrote {}", out.display());
    }
    if let Some(base) = baseline {
        print_for_a_person(
            &log::spec_comparison(&log::as_stored(&outcome.rows), &base),
            plan.output,
        )?;
    }
    Ok(())
}

/// `tokscope bench`.
pub(crate) fn run(args: &BenchArgs, settings: Settings) -> Result<(), Failure> {
    args.trace.check_force(&[("--plot", args.plot.is_some())])?;
    if args.trace.trace.is_some() && (args.run_vs_tg.is_some() || args.spec.given()) {
        return Err(Failure::usage(
            "--trace records the sweep's timed repetitions (pp, tg, pg, batch); --spec, --draft \
             and --run-vs-tg are not traced (leave out --trace, or those)",
        ));
    }
    if args.run_vs_tg.is_some() {
        return run_vs_tg(args, &settings);
    }
    if args.spec.given() {
        return run_spec(args, &settings);
    }
    let plan = plan(args, &settings)?;
    args.trace.check()?;
    run::check_models(&plan.models)?;
    let log_path = log::results_path(&crate::paths::data_dir());
    // `--vs last` is chosen once this run's rows are known: the last run of the same model
    // and tests (an id names its run, whatever it measured).
    let (baseline, earlier) = match plan.vs.as_deref() {
        Some("last") => {
            let (runs, _) = super::results::read_log(&log_path)?;
            log::find_run(&runs, "last").map_err(|e| Failure::usage(format!("--vs last: {e}")))?;
            (None, Some(runs))
        }
        query => (baseline(&log_path, query, log::find_run)?, None),
    };
    let now = std::time::SystemTime::now();
    let run_id = crate::ids::new_id(now);
    let jobs = sweep::expand(&plan.models, &plan.sweep);
    let outcome = run::run_jobs(&plan, &jobs, &settings.sampling, &run_id);
    args.trace.write(outcome.trace)?;
    let mut rows = outcome.rows;
    report::relate_batches(&mut rows);
    report::relate_depths(&mut rows);
    print_results(format::render(&rows, plan.output), plan.output)?;
    if !rows.is_empty() {
        save(&log_path, &run_id, crate::ids::unix_s(now), &rows);
    }
    if let Some(path) = &plan.plot {
        let notes = crate::bench::plots::write_rows(&rows, path)
            .map_err(|e| Failure::new(FAILURE, format!("--plot: {e}")))?;
        for note in notes {
            eprintln!("{note}");
        }
    }
    let stored = log::as_stored(&rows);
    let baseline = match &earlier {
        Some(runs) => match log::last_comparable(runs, &stored) {
            Ok(run) => Some(run.clone()),
            Err(e) => {
                eprintln!("--vs last: {e}");
                None
            }
        },
        None => baseline,
    };
    if let Some(base) = baseline {
        print_for_a_person(&log::comparison(&stored, &base), plan.output)?;
    }
    match outcome.failures.as_slice() {
        [] => Ok(()),
        failures => Err(Failure::of(
            outcome.model_failed,
            format!(
                "{} of {} tests failed:\n  {}",
                failures.len(),
                jobs.len(),
                failures.join("\n  ")
            ),
        )),
    }
}

/// The run `--vs` names (`find`: any run, or a speculative sweep), read before measuring so
/// that a wrong id fails at once; `None` without `--vs`.
fn baseline(
    log_path: &std::path::Path,
    query: Option<&str>,
    find: for<'a> fn(&'a [StoredRun], &str) -> Result<&'a StoredRun, String>,
) -> Result<Option<StoredRun>, Failure> {
    let Some(query) = query else {
        return Ok(None);
    };
    let (runs, _) = super::results::read_log(log_path)?;
    find(&runs, query)
        .map(|run| Some(run.clone()))
        .map_err(|e| Failure::usage(format!("--vs {query}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::USAGE;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn llama_bench_short_flags_become_long_only_for_bench() {
        let out = rewrite_llama_bench_flags(os(&[
            "tokscope",
            "bench",
            "-ngl",
            "99",
            "-ctk",
            "q8_0",
            "-ctv=q4_0",
            "-fa",
            "1",
            "-ub",
            "256",
            "-pg",
            "512,128",
            "-p",
            "5",
        ]));
        assert_eq!(
            out,
            os(&[
                "tokscope",
                "bench",
                "--n-gpu-layers",
                "99",
                "--cache-type-k",
                "q8_0",
                "--cache-type-v=q4_0",
                "--flash-attn",
                "1",
                "--ubatch-size",
                "256",
                "--pg",
                "512,128",
                "-p",
                "5",
            ])
        );
        let other = os(&["tokscope", "run", "-fa", "x"]);
        assert_eq!(rewrite_llama_bench_flags(other.clone()), other);
        let with_config =
            rewrite_llama_bench_flags(os(&["tokscope", "--config", "bench", "bench", "-fa", "0"]));
        assert_eq!(
            with_config,
            os(&[
                "tokscope",
                "--config",
                "bench",
                "bench",
                "--flash-attn",
                "0"
            ])
        );
        let after_dashes = rewrite_llama_bench_flags(os(&["tokscope", "bench", "--", "-fa"]));
        assert_eq!(after_dashes, os(&["tokscope", "bench", "--", "-fa"]));
    }

    #[test]
    fn int_lists_and_ranges() {
        let l = |s: &str| parse_int_list("-t", &[s.to_string()], -1, 1000);
        assert_eq!(l("1,2,4").unwrap(), vec![1, 2, 4]);
        assert_eq!(l("1-4").unwrap(), vec![1, 2, 3, 4]);
        assert_eq!(l("1-16*2").unwrap(), vec![1, 2, 4, 8, 16]);
        assert_eq!(l("0-10+5").unwrap(), vec![0, 5, 10]);
        assert_eq!(l("-1").unwrap(), vec![-1]);
        assert_eq!(l("-1,5").unwrap(), vec![-1, 5]);
        for bad in ["x", "", "1-", "4-1", "1-8*1", "1,,2"] {
            let e = l(bad).unwrap_err();
            assert_eq!(e.code, USAGE, "{bad}");
            assert!(
                e.message.contains("-t") && e.message.contains('`'),
                "{}",
                e.message
            );
        }
        let e = parse_int_list("-t/--threads", &["0".into()], 1, 1024).unwrap_err();
        assert!(
            e.message.contains("`0`") && e.message.contains("-t/--threads"),
            "{}",
            e.message
        );
    }

    fn plan(args: &[&str]) -> Result<BenchPlan, Failure> {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let argv = rewrite_llama_bench_flags(os(&[&["tokscope", "bench"][..], args].concat()));
        let w = Wrapper::try_parse_from(argv.into_iter().skip(1))
            .map_err(|e| Failure::usage(e.to_string()))?;
        let settings = Settings {
            model: Some(PathBuf::from("m.gguf")),
            ..Settings::default()
        };
        super::plan(&w.bench, &settings)
    }

    #[test]
    fn defaults_are_llama_bench_s() {
        let p = plan(&[]).unwrap();
        assert_eq!(
            p.sweep.tests,
            vec![TestSpec::Pp { n_prompt: 512 }, TestSpec::Tg { n_gen: 128 }]
        );
        assert_eq!(p.repetitions, 5);
        assert_eq!(p.sweep.n_batch, vec![2048]);
        assert_eq!(p.sweep.n_ubatch, vec![512]);
        assert_eq!(p.sweep.n_gpu_layers, vec![-1]);
        assert_eq!(p.sweep.type_k, vec![KvType::F16]);
        assert_eq!(p.sweep.flash_attn, vec![FlashAttn::Auto]);
        assert_eq!(p.sweep.n_depth, vec![0]);
        assert_eq!(
            p.sweep.threads,
            vec![crate::llama::settings::default_threads()]
        );
        assert_eq!(p.output, OutputFormat::Markdown);
        assert_eq!(p.price_per_gpu_hour_usd, 2.0);
        assert_eq!(p.bandwidth, BandwidthChoice::Auto { probe: true });
        assert!(p.sweep.batch_tests.is_empty());
    }

    #[test]
    fn flags_parse_like_llama_bench() {
        let p = plan(&[
            "-p",
            "0",
            "-n",
            "16,32",
            "-pg",
            "8,4",
            "-fa",
            "0,1",
            "-ctk",
            "q8_0",
            "-ngl",
            "-1,0",
            "--batch",
            "1,2",
            "-o",
            "jsonl",
            "--bandwidth-gb-s",
            "10",
            "--price",
            "3.5",
        ])
        .unwrap();
        assert_eq!(
            p.sweep.tests,
            vec![
                TestSpec::Tg { n_gen: 16 },
                TestSpec::Tg { n_gen: 32 },
                TestSpec::Pg {
                    n_prompt: 8,
                    n_gen: 4
                }
            ]
        );
        assert_eq!(p.sweep.flash_attn, vec![FlashAttn::Off, FlashAttn::On]);
        assert_eq!(p.sweep.n_gpu_layers, vec![-1, 0]);
        assert_eq!(
            p.sweep.batch_tests.len(),
            4,
            "1 prompt × 2 gen × 2 batch sizes"
        );
        assert_eq!(p.output, OutputFormat::JsonLines);
        assert_eq!(p.bandwidth, BandwidthChoice::Configured(10e9));
        assert_eq!(p.price_per_gpu_hour_usd, 3.5);
    }

    #[test]
    fn bad_values_name_the_flag_and_value() {
        for (args, flag, value) in [
            (&["-t", "0"][..], "-t/--threads", "0"),
            (&["--batch", "0"][..], "--batch", "0"),
            (&["-r", "0"][..], "-r/--repetitions", "0"),
            (&["-r", "2,3"][..], "-r/--repetitions", "2,3"),
            (&["-p", "abc"][..], "-p/--n-prompt", "abc"),
            (&["-ctk", "q3_k"][..], "-ctk/--cache-type-k", "q3_k"),
            (&["-fa", "maybe"][..], "-fa/--flash-attn", "maybe"),
            (&["-o", "xml"][..], "-o/--output", "xml"),
            (&["--price", "0"][..], "--price", "0"),
            (&["--bandwidth-gb-s", "-3"][..], "--bandwidth-gb-s", "-3"),
            (&["-pg", "5"][..], "-pg/--pg", "5"),
            (&["-ngl", "-2"][..], "-ngl/--n-gpu-layers", "-2"),
            (&["--batch", "300"][..], "--batch", "300"),
        ] {
            let e = plan(args).unwrap_err();
            assert_eq!(e.code, USAGE, "{args:?}");
            assert!(
                e.message.contains(flag) && e.message.contains(&format!("`{value}`")),
                "{args:?}: {}",
                e.message
            );
        }
        let e = plan(&["-p", "0", "-n", "0"]).unwrap_err();
        assert!(e.message.contains("nothing to measure"), "{}", e.message);
        let e = plan(&["--batch", "8", "-b", "4"]).unwrap_err();
        assert!(
            e.message.contains("--batch") && e.message.contains("-b/--batch-size"),
            "{}",
            e.message
        );
    }
}
