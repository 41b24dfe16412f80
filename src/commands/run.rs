//! `tokscope run`: one answer, headless. The text streams to stdout as it is generated and a
//! human summary of the metrics goes to stderr; with `--json`, stdout gets one JSON object with
//! the text, every metric and the reproducibility stamp. It drives the same engine as the chat.

use std::io::{IsTerminal, Write};

use serde::Serialize;

use clap::Args;

use super::flags::{ModelArgs, SamplingArgs};
use crate::commands::{Failure, FAILURE};
use crate::config::Settings;
use crate::engine::{
    EngineEvent, EngineHandle, GenerateRequest, LlamaCounters, ModelInfo, StopReason, TurnReport,
};
use crate::metrics::{fmt_opt, TurnSummary};
use crate::stamp::Stamp;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// The user's message; `-` reads it from stdin (as does leaving out -p and -f when stdin
    /// is not a terminal).
    #[arg(short = 'p', long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// Read the user's message from a file (no 128 KiB limit, unlike one argument).
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        conflicts_with = "prompt"
    )]
    pub prompt_file: Option<std::path::PathBuf>,
    /// Print one JSON object (text, every metric, reproducibility stamp) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Generate exactly --max-tokens tokens, ignoring end-of-generation tokens and stop
    /// strings (for measuring decode speed, like llama.cpp's --ignore-eos).
    #[arg(long)]
    pub ignore_eos: bool,
}

/// Everything `run --json` prints.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub text: String,
    pub stop_reason: StopReason,
    pub metrics: TurnSummary,
    /// Offset of each token's text-ready time from the request, in ms.
    pub token_ready_ms: Vec<f64>,
    pub context_used: usize,
    pub llama_counters: LlamaCounters,
    /// Set for synthetic models: their speed is real, their text is noise.
    pub warning: Option<&'static str>,
    pub stamp: Stamp,
}

impl RunReport {
    pub fn new(report: &TurnReport, info: &ModelInfo, settings: &Settings) -> Self {
        Self {
            text: report.text.clone(),
            stop_reason: report.stop_reason,
            metrics: report.timeline.summary(),
            token_ready_ms: report
                .timeline
                .token_ready_at
                .iter()
                .map(|d| crate::metrics::ms(*d))
                .collect(),
            context_used: report.context_used,
            llama_counters: report.llama_counters,
            warning: info.synthetic.then_some(ModelInfo::SYNTHETIC_LABEL),
            stamp: Stamp::new(info, &settings.sampling),
        }
    }
}

pub fn run(args: &RunArgs, mut settings: Settings) -> Result<(), Failure> {
    args.model.apply(&mut settings)?;
    args.sampling.apply(&mut settings)?;
    let config = crate::commands::model::engine_config(&settings)?;
    let prompt = read_prompt(args)?;
    let messages = crate::commands::model::single_turn(&settings, &prompt);
    let (mut engine, mut events) = EngineHandle::spawn(config)?;
    let show_progress = std::io::stderr().is_terminal() && !args.json;
    let mut stdout = std::io::stdout().lock();
    let mut info: Option<ModelInfo> = None;
    let mut request = None;
    while let Some(event) = events.blocking_recv() {
        match event {
            EngineEvent::Loading { progress } if show_progress => {
                eprint!("\rloading model… {:>3.0}%", progress * 100.0);
            }
            EngineEvent::Ready(i) => {
                if show_progress {
                    eprint!("\r\x1b[2K");
                }
                match &i.template_note {
                    Some(note) if !args.json => eprintln!("note: {note}"),
                    _ => {}
                }
                request = Some(engine.send_request(GenerateRequest {
                    id: engine.next_id(),
                    messages: messages.clone(),
                    sampling: settings.sampling.clone(),
                    max_tokens: settings.max_tokens,
                    capture_first_logits: false,
                    ignore_eos: args.ignore_eos,
                    submitted_at: std::time::Instant::now(),
                })?);
                info = Some(*i);
            }
            EngineEvent::LoadFailed(e) => return Err(e.into()),
            EngineEvent::Token {
                request_id, text, ..
            } if Some(request_id) == request && !args.json => {
                let written = stdout
                    .write_all(text.as_bytes())
                    .and_then(|()| stdout.flush());
                if quiet_on_closed_pipe(written)? {
                    engine.shutdown();
                    return Ok(());
                }
            }
            EngineEvent::Finished { request_id, report } if Some(request_id) == request => {
                let info = info
                    .ok_or_else(|| Failure::new(FAILURE, "engine finished before it was ready"))?;
                let full = RunReport::new(&report, &info, &settings);
                let written = if args.json {
                    let json = serde_json::to_string_pretty(&full)
                        .map_err(|e| Failure::new(FAILURE, e.to_string()))?;
                    writeln!(stdout, "{json}")
                } else {
                    writeln!(stdout).map(|()| eprint!("{}", human_summary(&full, &info)))
                };
                quiet_on_closed_pipe(written.and_then(|()| stdout.flush()))?;
                engine.shutdown();
                return Ok(());
            }
            EngineEvent::Failed { request_id, error } if Some(request_id) == request => {
                return Err(error.into())
            }
            _ => {}
        }
    }
    Err(Failure::new(FAILURE, "the engine stopped unexpectedly"))
}

/// The prompt from -p, -f, or stdin (`-p -`, or neither flag with stdin not a terminal).
fn read_prompt(args: &RunArgs) -> Result<String, Failure> {
    use std::io::Read;
    let from_stdin = || -> Result<String, Failure> {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(|e| {
            Failure::new(
                crate::commands::USAGE,
                format!("could not read the prompt from stdin: {e}"),
            )
        })?;
        Ok(text)
    };
    let text = match (&args.prompt, &args.prompt_file) {
        (Some(p), _) if p == "-" => from_stdin()?,
        (Some(p), _) => p.clone(),
        (None, Some(file)) => std::fs::read_to_string(file).map_err(|e| {
            Failure::new(
                crate::commands::USAGE,
                format!("could not read the prompt file {}: {e}", file.display()),
            )
        })?,
        (None, None) if !std::io::stdin().is_terminal() => from_stdin()?,
        (None, None) => {
            return Err(Failure::new(
                crate::commands::USAGE,
                "no prompt: give -p TEXT, -f FILE, or pipe it in (`echo hi | tokscope run`)",
            ))
        }
    };
    if text.trim().is_empty() {
        return Err(Failure::new(crate::commands::USAGE, "the prompt is empty"));
    }
    Ok(text)
}

/// A write to stdout: `Ok(true)` when the reader went away (`| head -1`), which ends the run
/// quietly; other errors are failures.
fn quiet_on_closed_pipe(written: std::io::Result<()>) -> Result<bool, Failure> {
    match written {
        Ok(()) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// The stderr summary of a headless run.
pub fn human_summary(r: &RunReport, info: &ModelInfo) -> String {
    let m = &r.metrics;
    let mut out = String::new();
    out.push_str(&format!(
        "── {} ({}, {:.0}M params, {}) · {} · {} threads · template {}\n",
        info.file_name,
        info.architecture,
        info.n_params as f64 / 1e6,
        info.quantization,
        info.backend,
        info.threads,
        info.template,
    ));
    if let Some(w) = r.warning {
        out.push_str(&format!("!! {w}\n"));
    }
    out.push_str(&format!(
        "prompt   {} tokens ({} from cache) · prefill {:.1} ms · {} tok/s\n",
        m.prompt_tokens,
        m.cached_tokens,
        m.prefill_ms,
        fmt_opt(m.prefill_tok_per_s, 1)
    ));
    out.push_str(&format!(
        "TTFT     {} ms (template+tokenize {:.2} ms, prefill {:.1} ms, first sample {} ms)\n",
        fmt_opt(m.ttft_ms, 1),
        m.template_tokenize_ms,
        m.prefill_ms,
        fmt_opt(m.first_sample_ms, 2)
    ));
    out.push_str(&format!(
        "decode   {} tokens · {} tok/s · TPOT {} ms\n",
        m.tokens_generated,
        fmt_opt(m.decode_tok_per_s, 1),
        fmt_opt(m.tpot_ms, 2)
    ));
    if let Some(itl) = &m.itl {
        out.push_str(&format!(
            "ITL      mean {:.2} · p50 {:.2} · p90 {:.2} · p99 {:.2} · max {:.2} ms\n",
            itl.mean_ms, itl.p50_ms, itl.p90_ms, itl.p99_ms, itl.max_ms
        ));
    }
    out.push_str(&format!(
        "E2E      {:.1} ms · stop: {} · context {}/{}\n",
        m.e2e_ms,
        r.stop_reason.as_str(),
        r.context_used,
        info.n_ctx
    ));
    out
}
