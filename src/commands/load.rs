//! `tokscope load --url URL`: how many users a server carries at given latency targets. One
//! level (`--rate` or `--concurrency`), a sweep of levels, or `--find-capacity`; progress on
//! stderr, the table on stdout (md, csv or json).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::commands::flags::RemoteArgs;
use crate::commands::runtime_threads;
use crate::commands::{Failure, FAILURE};
use crate::load::report::{self, LoadSummary, Slo};
use crate::load::{publish, run_level, scrape, warm_up, Arrivals, LoadPlan, Progress, PromptSet};
use crate::remote::{Endpoint, RemoteClient};

/// The eval text (public domain) the default prompts are cut from.
const EVAL_TEXT: &str = include_str!("../../assets/eval/alice.txt");

#[derive(Debug, Args)]
pub struct LoadArgs {
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// The server's model name (default: the first of GET /v1/models).
    #[arg(short = 'm', long, value_name = "NAME")]
    pub model: Option<String>,
    /// Requests per second (a gamma arrival process; Poisson with --burstiness 1).
    #[arg(long, value_name = "R", conflicts_with = "concurrency")]
    pub rate: Option<f64>,
    /// Gamma shape of the arrival gaps: 1 is Poisson, below 1 burstier, above 1 more regular.
    #[arg(long, value_name = "K", default_value_t = 1.0)]
    pub burstiness: f64,
    /// Keep this many requests in flight.
    #[arg(long, value_name = "C")]
    pub concurrency: Option<usize>,
    /// Measured requests per level (default 32 when --duration is not given).
    #[arg(long, value_name = "N")]
    pub requests: Option<usize>,
    /// Seconds per level.
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Warm-up requests before each level, excluded from the figures.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub warmup: usize,
    /// Prompt length: N or A..B tokens (of the server's tokenizer where it has /tokenize).
    #[arg(long, value_name = "N|A..B", default_value = "128")]
    pub input_len: String,
    /// Prompts from a JSONL file instead: one JSON object per line with "messages"
    /// ([{role, content}, …]) or "prompt" (a string).
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    /// Output tokens per request (max_tokens, with ignore_eos so every answer is this long).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub output_len: u32,
    /// Do not send ignore_eos (for servers that refuse it).
    #[arg(long)]
    pub no_ignore_eos: bool,
    /// Latency targets for goodput, e.g. ttft=500ms,tpot=50ms,e2e=10s.
    #[arg(long, value_name = "LIST")]
    pub slo: Option<String>,
    /// Several levels: rate=1,2,4 or concurrency=1,2,4.
    #[arg(long, value_name = "KIND=LIST", conflicts_with_all = ["rate", "concurrency"])]
    pub sweep: Option<String>,
    /// Search for the highest rate whose goodput holds the SLOs (needs --slo).
    #[arg(long, requires = "slo", conflicts_with_all = ["rate", "concurrency", "sweep"])]
    pub find_capacity: bool,
    /// Output format of the table: md, csv or json.
    #[arg(short = 'o', long, value_name = "FMT", default_value = "md")]
    pub output: String,
    /// Seed of the arrival times and prompt choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds to wait for requests in flight after Ctrl-C.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub drain: f64,
    /// Read the server's Prometheus metrics (`GET /metrics`) every MS milliseconds during each
    /// level, after a baseline taken once its warm-up is done: requests running and waiting,
    /// KV-cache usage, tokens and preemptions counted, its own TTFT/ITL/E2E histograms (vLLM,
    /// SGLang, llama-server with --metrics, TensorRT-LLM, Dynamo, Ray Serve, KServe). 0: off.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub metrics_interval: u64,
    /// Serve tokscope's own client-side figures at http://ADDR/metrics while the test runs
    /// (Prometheus text; vLLM's names with `tokscope:` for `vllm:`, vLLM's bucket bounds),
    /// e.g. 127.0.0.1:9464 (port 0: any free one, said on stderr).
    #[arg(long, value_name = "ADDR")]
    pub prometheus: Option<String>,
    /// Keep serving --prometheus this many seconds after the report, so that a scraper sees
    /// the last figures (Ctrl-C ends the wait).
    #[arg(long, value_name = "S", default_value_t = 0.0, requires = "prometheus")]
    pub prometheus_hold: f64,
    /// Send OpenTelemetry GenAI client metrics (gen_ai.client.operation.duration,
    /// time_to_first_chunk, time_per_output_chunk, token.usage) after each level, as OTLP/HTTP
    /// JSON to this collector URL (http://HOST:4318 gets /v1/metrics).
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Write the same OTLP export requests to this file, one JSON line each.
    #[arg(long, value_name = "PATH")]
    pub otlp_file: Option<PathBuf>,
    /// Overwrite an existing --otlp-file.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Serialize)]
struct LoadOutput<'a> {
    host: String,
    model: &'a str,
    prompts: &'a str,
    levels: &'a [LoadSummary],
    capacity: Option<String>,
}

fn parse_range(s: &str) -> Result<(usize, usize), Failure> {
    let bad = || Failure::usage(format!("--input-len '{s}': expected N or A..B (tokens)"));
    let (lo, hi) = match s.split_once("..") {
        Some((a, b)) => (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        ),
        None => {
            let n = s.trim().parse().map_err(|_| bad())?;
            (n, n)
        }
    };
    if lo == 0 || hi < lo || hi > 100_000 {
        return Err(bad());
    }
    Ok((lo, hi))
}

fn parse_sweep(s: &str, burstiness: f64) -> Result<Vec<Arrivals>, Failure> {
    let bad = || {
        Failure::usage(format!(
            "--sweep '{s}': expected rate=1,2,4 or concurrency=1,2,4"
        ))
    };
    let (kind, list) = s.split_once('=').ok_or_else(bad)?;
    let level = |v: &str| match kind.trim() {
        "rate" => {
            let per_s: f64 = v.parse().map_err(|_| bad())?;
            check_rate(per_s)?;
            Ok(Arrivals::Rate { per_s, burstiness })
        }
        "concurrency" => {
            let c: usize = v.parse().map_err(|_| bad())?;
            check_concurrency(c)?;
            Ok(Arrivals::Concurrency(c))
        }
        _ => Err(bad()),
    };
    list.split(',').map(str::trim).map(level).collect()
}

fn check_rate(r: f64) -> Result<(), Failure> {
    if r.is_finite() && r > 0.0 && r <= 10_000.0 {
        Ok(())
    } else {
        Err(Failure::usage(format!(
            "rate {r}: expected requests per second in (0, 10000]"
        )))
    }
}

fn check_concurrency(c: usize) -> Result<(), Failure> {
    if (1..=4096).contains(&c) {
        Ok(())
    } else {
        Err(Failure::usage(format!(
            "concurrency {c}: expected 1 to 4096"
        )))
    }
}

fn jsonl_prompts(path: &PathBuf) -> Result<PromptSet, Failure> {
    use crate::engine::{ChatMessage, Role};
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::usage(format!("--prompts {}: cannot read it: {e}", path.display()))
    })?;
    let mut prompts = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |why: &str| {
            Failure::usage(format!(
                "--prompts {} line {}: {why}",
                path.display(),
                i + 1
            ))
        };
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| bad(&format!("not JSON: {e}")))?;
        if let Some(p) = v.get("prompt").and_then(|p| p.as_str()) {
            prompts.push(vec![ChatMessage::new(Role::User, p)]);
            continue;
        }
        let messages = v
            .get("messages")
            .and_then(|m| m.as_array())
            .ok_or_else(|| bad("expected \"messages\" or \"prompt\""))?;
        let mut conv = Vec::new();
        for m in messages {
            let role = match m.get("role").and_then(|r| r.as_str()) {
                Some("system") => Role::System,
                Some("user") => Role::User,
                Some("assistant") => Role::Assistant,
                _ => return Err(bad("a message's role must be system, user or assistant")),
            };
            let content = m
                .get("content")
                .and_then(|c| c.as_str())
                .ok_or_else(|| bad("a message has no string \"content\""))?;
            conv.push(ChatMessage::new(role, content));
        }
        prompts.push(conv);
    }
    if prompts.is_empty() {
        return Err(Failure::usage(format!(
            "--prompts {}: no prompts in it",
            path.display()
        )));
    }
    Ok(PromptSet {
        prompts,
        warmup: Vec::new(),
        source: format!("{} (JSONL)", path.display()),
    })
}

pub(crate) fn load(args: &LoadArgs) -> Result<(), Failure> {
    let checked = check(args)?;
    // Said once: a server without (readable) metrics.
    let metrics_refused = Arc::new(AtomicBool::new(false));
    let rt = runtime_threads(crate::load::client_threads())?;
    let stop = Arc::new(AtomicBool::new(false));
    rt.block_on(async {
        // Ctrl-C is ours from the start: while the model is looked up and the prompts are cut
        // it ends `load` at once; during a level it stops sending (see `run_level`).
        stop_on_ctrl_c(Arc::clone(&stop));
        let (slo, exporters) = (checked.slo, &checked.exporters);
        let client = Arc::new(RemoteClient::new(checked.endpoint)?);
        let figures = exporters.figures(client.endpoint().host_and_port());
        // Listening first: a port in use is said before anything is sent.
        let _exposition = expose(exporters.prometheus, figures.as_ref()).await?;
        let (model, prompts) = tokio::select! {
            prepared = prepare(args, &client, checked.requests, checked.input_len) => prepared?,
            () = stopped(&stop) => return Err(Failure::new(
                FAILURE,
                "stopped by Ctrl-C while looking up the model and cutting the prompts: nothing was measured",
            )),
        };
        if let Some(Ok(mut f)) = figures.as_ref().map(|f| f.lock()) {
            f.set_model(&model);
        }
        let plan = |arrivals| LoadPlan {
            arrivals,
            requests: checked.requests,
            duration: checked.duration,
            warmup: args.warmup,
            model: model.clone(),
            output_len: args.output_len,
            ignore_eos: !args.no_ignore_eos,
            slo,
            seed: args.seed,
            drain: checked.drain,
        };
        let run = |arrivals: Arrivals| {
            measure_level(
                Arc::clone(&client),
                plan(arrivals),
                &prompts,
                Arc::clone(&stop),
                Arc::clone(&metrics_refused),
                figures.clone(),
                checked.metrics_interval,
            )
        };
        let levels = checked.levels;
        let measured =
            run_levels(args, levels, slo, &run, &stop, exporters, figures.as_ref()).await?;
        print_rows(
            args,
            &client,
            &model,
            &prompts,
            &measured.rows,
            measured.capacity,
        )?;
        if let Some(served) = &_exposition {
            hold(served.addr, args.prometheus_hold, &stop).await;
        }
        if let Some(why) = measured.otlp_failed {
            return Err(Failure::new(
                FAILURE,
                format!("the OTLP export failed: {why} (the report above is complete)"),
            ));
        }
        Ok::<(), Failure>(())
    })
}

/// The flags checked, in the order they are read, before anything runs: everything the levels
/// share but the model and the prompts.
struct Checked {
    endpoint: Endpoint,
    slo: Option<Slo>,
    duration: Option<Duration>,
    requests: Option<usize>,
    input_len: (usize, usize),
    levels: Vec<Arrivals>,
    drain: Duration,
    metrics_interval: Duration,
    exporters: publish::Exporters,
}

/// Reads and checks every flag; each refusal names its flag.
fn check(args: &LoadArgs) -> Result<Checked, Failure> {
    let url =
        args.remote.url.as_deref().ok_or_else(|| {
            Failure::usage("load needs --url URL (an OpenAI-compatible API base)")
        })?;
    let endpoint = args.remote.endpoint(url)?;
    if !matches!(args.output.as_str(), "md" | "csv" | "json") {
        return Err(Failure::usage(format!(
            "-o {}: expected md, csv or json",
            args.output
        )));
    }
    if !(args.burstiness.is_finite() && args.burstiness > 0.0 && args.burstiness <= 100.0) {
        return Err(Failure::usage(
            "--burstiness: expected a gamma shape in (0, 100]",
        ));
    }
    let slo = args
        .slo
        .as_deref()
        .map(Slo::parse)
        .transpose()
        .map_err(|e| Failure::usage(format!("--slo: {e}")))?;
    let (duration, requests) = level_size(args)?;
    if args.output_len == 0 {
        return Err(Failure::usage("--output-len: expected at least 1"));
    }
    let input_len = parse_range(&args.input_len)?;
    let levels = levels(args)?;
    if args.metrics_interval != 0 && !(50..=60_000).contains(&args.metrics_interval) {
        return Err(Failure::usage(format!(
            "--metrics-interval {}: expected milliseconds from 50 to 60000 (0: off)",
            args.metrics_interval
        )));
    }
    Ok(Checked {
        endpoint,
        slo,
        duration,
        requests,
        input_len,
        levels,
        drain: Duration::from_secs_f64(args.drain.clamp(0.0, 600.0)),
        metrics_interval: Duration::from_millis(args.metrics_interval),
        exporters: exporters(args)?,
    })
}

/// How long a level lasts: `--duration`, and `--requests` (32 when neither is given).
fn level_size(args: &LoadArgs) -> Result<(Option<Duration>, Option<usize>), Failure> {
    let duration = match args.duration {
        Some(d) if d.is_finite() && d > 0.0 && d <= 86_400.0 => Some(Duration::from_secs_f64(d)),
        Some(d) => {
            return Err(Failure::usage(format!(
                "--duration {d}: expected seconds in (0, 86400]"
            )))
        }
        None => None,
    };
    let requests = match (args.requests, duration) {
        (Some(0), _) => return Err(Failure::usage("--requests: expected at least 1")),
        (Some(n), _) => Some(n),
        (None, None) => Some(32),
        (None, Some(_)) => None,
    };
    Ok((duration, requests))
}

/// The levels to run: `--sweep`'s, `--rate`'s, none for `--find-capacity` (it picks its own),
/// else `--concurrency` (1 by default).
fn levels(args: &LoadArgs) -> Result<Vec<Arrivals>, Failure> {
    Ok(if let Some(s) = &args.sweep {
        parse_sweep(s, args.burstiness)?
    } else if let Some(r) = args.rate {
        check_rate(r)?;
        vec![Arrivals::Rate {
            per_s: r,
            burstiness: args.burstiness,
        }]
    } else if args.find_capacity {
        Vec::new()
    } else {
        let c = args.concurrency.unwrap_or(1);
        check_concurrency(c)?;
        vec![Arrivals::Concurrency(c)]
    })
}

/// Sets `stop` on Ctrl-C, saying so on stderr.
fn stop_on_ctrl_c(stop: Arc<AtomicBool>) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\nstopping: no new requests; waiting for those in flight…");
            stop.store(true, Ordering::SeqCst);
        }
    });
}

/// Ends once `stop` is set.
async fn stopped(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `--prometheus`: serves `figures` at `addr` (said on stderr) until the returned guard drops.
async fn expose(
    addr: Option<std::net::SocketAddr>,
    figures: Option<&publish::Shared>,
) -> Result<Option<publish::Exposition>, Failure> {
    let (Some(addr), Some(figures)) = (addr, figures) else {
        return Ok(None);
    };
    let served = publish::serve(addr, Arc::clone(figures))
        .await
        .map_err(Failure::usage)?;
    eprintln!(
        "tokscope's own figures: http://{}/metrics (Prometheus text)",
        served.addr
    );
    Ok(Some(served))
}

/// The model (`-m`, else the server's first) and the prompts (`--prompts`, else cut from the
/// eval text), with the warm-up's set apart; what to say about them goes to stderr.
async fn prepare(
    args: &LoadArgs,
    client: &RemoteClient,
    requests: Option<usize>,
    input_len: (usize, usize),
) -> Result<(String, PromptSet), Failure> {
    let model = match &args.model {
        Some(m) => m.clone(),
        None => client.default_model().await?,
    };
    let n_prompts = requests.unwrap_or(64).clamp(1, 256);
    // The warm-up's own prompts, none of them sent in a level (see `warm_up`).
    let n_warmup = args.warmup.min(256);
    let (prompts, note) = match &args.prompts {
        Some(p) => {
            let set = jsonl_prompts(p)?.set_apart_for_warmup(n_warmup);
            let note = (n_warmup > 0 && set.warmup.is_empty()).then(|| format!(
                "warm-up: {} has only {} prompts, so the warm-up sends the level's own and the server may answer the first of them from its prompt cache (give more prompts than --warmup to keep them apart)",
                p.display(),
                set.prompts.len()
            ));
            (set, note)
        }
        None => {
            let (set, note) = PromptSet::from_text(
                client,
                &model,
                EVAL_TEXT,
                input_len,
                (n_prompts, n_warmup),
                args.seed,
            )
            .await;
            (set, Some(note))
        }
    };
    if let Some(note) = note {
        eprintln!("{}", crate::text::terminal_safe(&note));
    }
    Ok((model, prompts))
}

/// One level: its warm-up, the server's metrics scraped from a baseline taken after it (unless
/// `--metrics-interval 0`, a server that refused them before, or Ctrl-C), the level itself
/// with a progress line on stderr.
async fn measure_level(
    client: Arc<RemoteClient>,
    plan: LoadPlan,
    prompts: &PromptSet,
    stop: Arc<AtomicBool>,
    refused: Arc<AtomicBool>,
    figures: Option<publish::Shared>,
    metrics_interval: Duration,
) -> Result<LoadSummary, crate::remote::RemoteError> {
    warm_up(&client, &plan, prompts, &stop).await?;
    // The baseline once the warm-up is done: the deltas are the level's own.
    let scraping = if metrics_interval.is_zero()
        || refused.load(Ordering::SeqCst)
        || stop.load(Ordering::SeqCst)
    {
        None
    } else {
        start_scraping(&client, metrics_interval, &refused).await
    };
    let progress = Arc::new(Progress::default());
    let ticker = spawn_progress(plan.arrivals.label(), Arc::clone(&progress));
    let out = run_level(client, &plan, prompts, stop, progress, figures.as_ref()).await;
    ticker.abort();
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
    let mut row = out?;
    if let Some(level) = scraping {
        row.server_metrics = level.finish().await;
    }
    Ok(row)
}

/// The server's metrics scraped every `interval` from now on; `None` when it refuses them,
/// said once on stderr and kept in `refused` for the levels after.
async fn start_scraping(
    client: &Arc<RemoteClient>,
    interval: Duration,
    refused: &AtomicBool,
) -> Option<scrape::Level> {
    match scrape::Level::start(Arc::clone(client), interval).await {
        Ok(level) => Some(level),
        Err(why) => {
            refused.store(true, Ordering::SeqCst);
            eprintln!(
                "{}",
                crate::text::terminal_safe(&format!(
                    "server metrics left out: {why} (llama-server serves them with --metrics; --metrics-interval 0 turns scraping off)"
                ))
            );
            None
        }
    }
}

/// What the levels gave: their rows, the capacity verdict (`--find-capacity`), and the first
/// OTLP export failure.
struct Measured {
    rows: Vec<LoadSummary>,
    capacity: Option<String>,
    otlp_failed: Option<String>,
}

/// Runs the levels with `run`: the capacity search with `--find-capacity`, else each of
/// `levels` until Ctrl-C. Each row is said on stderr as it ends; each level (the whole search
/// for the capacity) is followed by an OTLP export.
async fn run_levels<F, Fut>(
    args: &LoadArgs,
    levels: Vec<Arrivals>,
    slo: Option<Slo>,
    run: &F,
    stop: &AtomicBool,
    exporters: &publish::Exporters,
    figures: Option<&publish::Shared>,
) -> Result<Measured, Failure>
where
    F: Fn(Arrivals) -> Fut,
    Fut: std::future::Future<Output = Result<LoadSummary, crate::remote::RemoteError>>,
{
    let mut rows = Vec::new();
    let mut capacity = None;
    let mut otlp_failed = None;
    if args.find_capacity {
        let slo = slo.ok_or_else(|| Failure::usage("--find-capacity needs --slo"))?;
        let shown = |row: &LoadSummary| eprintln!("{}", row.line());
        capacity = Some(
            crate::load::capacity::find(&mut rows, run, slo, args.burstiness, stop, &shown).await?,
        );
        export(exporters, figures, &mut otlp_failed).await;
    } else {
        for arrivals in levels {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let row = run(arrivals).await?;
            eprintln!("{}", row.line());
            rows.push(row);
            export(exporters, figures, &mut otlp_failed).await;
        }
    }
    Ok(Measured {
        rows,
        capacity,
        otlp_failed,
    })
}

/// What `--prometheus`, `--otlp` and `--otlp-file` asked for, and `--prometheus-hold`, checked
/// before anything runs.
fn exporters(args: &LoadArgs) -> Result<publish::Exporters, Failure> {
    let exporters = publish::Exporters::new(
        args.prometheus.as_deref(),
        args.otlp.as_deref(),
        args.otlp_file.as_deref(),
        args.force,
    )
    .map_err(Failure::usage)?;
    if !(args.prometheus_hold.is_finite() && (0.0..=86_400.0).contains(&args.prometheus_hold)) {
        return Err(Failure::usage(format!(
            "--prometheus-hold {}: expected seconds in [0, 86400]",
            args.prometheus_hold
        )));
    }
    Ok(exporters)
}

/// One OTLP export of every level so far to each sink; the first failure is said once and
/// kept for the exit status.
async fn export(
    exporters: &publish::Exporters,
    figures: Option<&publish::Shared>,
    failed: &mut Option<String>,
) {
    let Some(figures) = figures else { return };
    for sink in &exporters.otlp {
        if let Err(why) = sink.export(figures).await {
            if failed.is_none() {
                eprintln!(
                    "{}",
                    crate::text::terminal_safe(&format!(
                        "OTLP export to {} failed: {why}; the run goes on and its report is kept",
                        sink.label()
                    ))
                );
                *failed = Some(why);
            }
        }
    }
}

/// Serves `/metrics` `secs` longer after the report, or until Ctrl-C.
async fn hold(addr: std::net::SocketAddr, secs: f64, stop: &AtomicBool) {
    if secs <= 0.0 {
        return;
    }
    eprintln!("serving http://{addr}/metrics {secs} s more (Ctrl-C ends it)");
    let until = std::time::Instant::now() + Duration::from_secs_f64(secs);
    while std::time::Instant::now() < until && !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn spawn_progress(label: String, p: Arc<Progress>) -> tokio::task::JoinHandle<()> {
    let tty = std::io::stderr().is_terminal();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(if tty { 250 } else { 5000 }));
        // The first tick is immediate: nothing has happened yet.
        tick.tick().await;
        loop {
            tick.tick().await;
            let line = format!(
                "{label}: sent {} · done {} · failed {} · in flight {}",
                p.sent.load(Ordering::SeqCst),
                p.done.load(Ordering::SeqCst),
                p.failed.load(Ordering::SeqCst),
                p.in_flight.load(Ordering::SeqCst)
            );
            if tty {
                eprint!("\r\x1b[2K{line}");
            } else {
                eprintln!("{line}");
            }
        }
    })
}

fn print_rows(
    args: &LoadArgs,
    client: &RemoteClient,
    model: &str,
    prompts: &PromptSet,
    rows: &[LoadSummary],
    capacity: Option<String>,
) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match args.output.as_str() {
        "json" => {
            let json = serde_json::to_string_pretty(&LoadOutput {
                host: client.endpoint().host_label(),
                model,
                prompts: &prompts.source,
                levels: rows,
                capacity,
            })
            .map_err(|e| Failure::new(FAILURE, e.to_string()))?;
            writeln!(out, "{}", crate::text::json_safe(&json))?;
        }
        "csv" => write!(
            out,
            "{}",
            crate::text::for_stdout(&report::csv(rows), crate::text::Shape::Csv)
        )?,
        _ => {
            // The model name is the server's bytes: the table is neutralised wherever it goes.
            let mut text = format!(
                "server {} · model {} · prompts {}\n\n{}",
                client.endpoint().host_label(),
                model,
                prompts.source,
                report::markdown(rows)
            );
            let server: Vec<String> = rows
                .iter()
                .filter_map(|r| Some(scrape::lines(&r.level, r.server_metrics.as_ref()?)))
                .flatten()
                .collect();
            if !server.is_empty() {
                text.push_str(&format!("\n{}\n", server.join("\n")));
            }
            if let Some(c) = capacity {
                text.push_str(&format!("\n{c}\n"));
            }
            write!(
                out,
                "{}",
                crate::text::for_stdout(&text, crate::text::Shape::Human)
            )?;
        }
    }
    out.flush()?;
    Ok(())
}
