//! `tokscope run`: one answer, headless. The text streams to stdout as it is generated (taken
//! once per 50 ms stream frame, as the chat takes it, so that the engine never wakes this
//! thread; `--token-lines` writes each token the moment it arrives) and a human summary of the
//! metrics goes to stderr; with `--json`, stdout gets one JSON object with the text, every
//! metric and the reproducibility stamp. It drives the same engine as the chat. With `--url`,
//! the answer comes from an OpenAI-compatible server instead, streamed and measured.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde::Serialize;

use clap::Args;

use super::flags::{ModelArgs, SamplingArgs};
use crate::commands::{Failure, FAILURE};
use crate::config::Settings;
use crate::engine::{
    EngineEvent, EngineHandle, LlamaCounters, ModelInfo, StopReason, TurnReport, TurnRequest,
};
use crate::metrics::host::HostSummary;
use crate::metrics::remote::RemoteSummary;
use crate::metrics::{ms, TurnSummary};
use crate::remote::{ChatRequest, RemoteClient, RemoteError, StreamEnd};
use crate::stamp::Stamp;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub profile: super::profile::ProfileArgs,
    #[command(flatten)]
    pub trace: super::profile::TraceArgs,
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
    #[command(flatten)]
    pub remote: super::flags::RemoteArgs,
    /// Print one JSON object (text, every metric, reproducibility stamp) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print the prompt the model was given (its chat template rendered, special tokens as
    /// their text) to stderr after the answer, with its token count and the template's
    /// source. `--json` always carries it as `prompt`.
    #[arg(long)]
    pub show_prompt: bool,
    /// Write one JSON line per generated token to stdout the moment it arrives
    /// (`{"index":0,"text":"…"}`, flushed at once), instead of the bare text: an outside
    /// observer can count and time every token, also one whose text is held back (a split
    /// UTF-8 character) or empty. The summary still goes to stderr; --report keeps the figures.
    #[arg(long, conflicts_with = "json")]
    pub token_lines: bool,
    /// Generate exactly --max-tokens tokens, ignoring end-of-generation tokens and stop
    /// strings (for measuring decode speed, like llama.cpp's --ignore-eos).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Write the model's text exactly as generated even to a terminal (control characters
    /// included); by default they are neutralised when stdout is a terminal.
    #[arg(long)]
    pub raw: bool,
    /// Also write the JSON report (as --json prints it, one line per turn) to FILE, while the
    /// text streams to stdout: an outside observer can time the stream and read tokscope's
    /// own figures afterwards.
    #[arg(long, value_name = "FILE")]
    pub report: Option<std::path::PathBuf>,
    /// Send the run's figures when it ends as OpenTelemetry GenAI client metrics, as `chat
    /// --otlp` and `load --otlp` do (OTLP/HTTP JSON to this collector URL; http://HOST:4318
    /// gets /v1/metrics): a local model's turns as server "local", a --url server's as that
    /// server
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Write the same OTLP export request to this file when the run ends (one JSON line;
    /// --force replaces an existing file)
    #[arg(long, value_name = "PATH")]
    pub otlp_file: Option<std::path::PathBuf>,
    /// Answer N turns in one engine, the conversation growing by the answer and a user
    /// message of the same length each turn ("PROMPT (turn 01)", "… (turn 02)", …), so that
    /// KV prefix reuse shows in each turn's TTFT.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub turns: u32,
    /// With --turns: send the first turn's conversation again each turn instead of growing
    /// it; every later turn then prefills one token (the rest is in the KV cache).
    #[arg(long)]
    pub resend: bool,
    #[command(flatten)]
    pub quality: super::flags::QualityArgs,
    /// Report each answer token's own confidence without a reference: the probability the
    /// model gave the token it chose and the entropy of its distribution (nats), from the
    /// logits the host samples from, with the answer's mean p, min p, mean entropy and tokens
    /// under p 0.1 (docs/metrics.md, "Per token and per answer"). Its cost is part of host
    /// µs/token; with sampling on the backend there are no logits and it says so.
    #[arg(long)]
    pub confidence: bool,
}

/// Speculative decoding's flags (llama.cpp's names), shared by `run` and `chat`.
#[derive(Debug, Args, Default, Clone)]
pub struct SpecArgs {
    /// Speculative decoding: `ngram` (prompt lookup: no second model) or `off`; `--draft FILE`
    /// selects a draft model. Greedy, or temperature with top-k (no repetition penalty).
    #[arg(long = "spec", value_name = "MODE")]
    pub spec: Option<String>,
    /// Draft model for speculative decoding: a smaller GGUF with the target's vocabulary.
    #[arg(long = "draft", alias = "model-draft", value_name = "FILE")]
    pub draft: Option<std::path::PathBuf>,
    /// Most tokens drafted per step (default 8; 0 turns speculation off).
    #[arg(long = "draft-max", value_name = "N", allow_negative_numbers = true)]
    pub draft_max: Option<i64>,
    /// A shorter draft is not verified (default 0).
    #[arg(long = "draft-min", value_name = "N", allow_negative_numbers = true)]
    pub draft_min: Option<i64>,
    /// The draft model stops when its own probability of its next token falls below P
    /// (default 0: never).
    #[arg(long = "draft-p-min", value_name = "P", allow_negative_numbers = true)]
    pub draft_p_min: Option<f64>,
    /// Layers of the draft model offloaded to the GPU (-1 = all).
    #[arg(
        long = "draft-ngl",
        alias = "n-gpu-layers-draft",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub draft_ngl: Option<i64>,
    /// Length of the n-gram looked up by `--spec ngram` (default 3).
    #[arg(long = "ngram-n", value_name = "N", allow_negative_numbers = true)]
    pub ngram_n: Option<i64>,
    /// Batch-invariant CPU kernels for the target: `auto` (default: on while speculating),
    /// `on` or `off`. On, a verify pass computes every row as a one-token pass would (weights
    /// not repacked, ggml's tiled K-quant matmul off), so greedy speculation is token for
    /// token the plain decode; it costs some speed.
    #[arg(long = "batch-invariant", value_name = "auto|on|off")]
    pub batch_invariant: Option<String>,
}

impl SpecArgs {
    pub(crate) fn apply(&self, s: &mut Settings) -> Result<(), Failure> {
        use crate::config::apply_given;
        let src = crate::config::Source::CommandLine;
        if let Some(d) = &self.draft {
            s.set_draft_model(d);
        }
        apply_given!(s, &src;
            self.spec.as_deref() => set_spec_mode,
            self.draft_max => set_draft_max,
            self.draft_min => set_draft_min,
            self.draft_p_min => set_draft_p_min,
            self.draft_ngl => set_draft_ngl,
            self.ngram_n => set_ngram_n,
            self.batch_invariant.as_deref() => set_batch_invariant,
        );
        s.check_spec(&src)?;
        Ok(())
    }
}

/// `F32`, `F16` or `BF16` when the file says its weights are floats (`general.file_type`):
/// the types batch-invariant kernels cannot cover (`llama::invariant`).
fn float_weights(target: &std::path::Path) -> Option<&'static str> {
    let header = crate::gguf::read_metadata_without_arrays(target).ok()?;
    match header.get("general.file_type")?.as_u64()? {
        0 => Some("F32"),
        1 => Some("F16"),
        32 => Some("BF16"),
        _ => None,
    }
}

/// Warnings about a speculation setup that cannot pay: a draft model whose file is not
/// smaller than the target's (each drafted token then costs about a whole target pass), and
/// sampling that is not greedy (speculation is then off).
pub(crate) fn spec_warnings(settings: &Settings, target: &std::path::Path) -> Vec<String> {
    use crate::llama::settings::SpecMode;
    let spec = &settings.engine.spec;
    let mut out = Vec::new();
    if !spec.active() {
        return out;
    }
    if spec.mode == SpecMode::Draft {
        let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).ok();
        if let (Some(d), Some(t)) = (spec.draft_model.as_deref().and_then(size), size(target)) {
            if d >= t {
                out.push(format!(
                    "the draft model ({:.1} MB) is not smaller than the target ({:.1} MB): each drafted token costs about a target pass, so speculation cannot pay",
                    d as f64 / 1e6,
                    t as f64 / 1e6
                ));
            }
        }
    }
    if spec.batch_invariant_kernels() {
        if let Some(name) = float_weights(target) {
            out.push(format!(
                "{name} weights: llama.cpp computes a verify pass's rows of float weights with other kernels than a one-token pass (no switch for it), so greedy speculation can part from plain decoding at a near tie; batch-invariant kernels cover quantized weights only"
            ));
        }
    }
    let s = &settings.sampling;
    if s.repeat_penalty != 1.0 || (s.temperature > 0.0 && s.top_k == 0) {
        out.push(
            "speculation needs greedy decoding or temperature with top-k and no repetition penalty: it is off for these sampling settings"
                .to_string(),
        );
    }
    out
}

/// Everything `run --json` prints.
#[derive(Debug, Serialize)]
pub(crate) struct RunReport {
    /// The answer (for a model that thought first, the answer only).
    pub text: String,
    /// The prompt as the model was given it (the chat template rendered, special tokens as
    /// their text); its token count is `metrics.prompt_tokens`. Absent for a remote server,
    /// which builds the prompt itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The thinking's text of a model that reasons before it answers, markers left out (its
    /// figures are `metrics.thinking`); absent for a turn without thinking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    pub stop_reason: StopReason,
    pub metrics: TurnSummary,
    /// Offset of each token's text-ready time from the request, in ms.
    pub token_ready_ms: Vec<f64>,
    pub context_used: usize,
    pub llama_counters: LlamaCounters,
    /// Host time per generated token between decode calls, and its parts (docs/metrics.md).
    pub host: HostSummary,
    /// The sampling path: `host-greedy`, `host-top-k`, `host-chain` or `backend`.
    pub sampler: &'static str,
    /// Where the sampler chain ran (`{"place": "backend"|"host", "why": …}`, `--sampling`);
    /// absent for a remote server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<crate::llama::sampler::SamplingPlace>,
    /// Speculative decoding's figures (docs/metrics.md), when speculating.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<crate::metrics::spec::SpecSummary>,
    /// The decode against the bandwidth ceiling at the answer's final depth, as the chat's
    /// roofline pane shows it; `null` when the model's bytes per token or a bandwidth is not
    /// known.
    pub roofline: Option<crate::metrics::roofline::Figures>,
    /// Why the figures cannot be fully vouched for, joined by "; ": synthetic weights (their
    /// speed is real, their text is noise), a busy machine (load average before or after, a
    /// stall between tokens), each with the advice to rerun. `null` when clean.
    pub warning: Option<String>,
    /// Time to ready and where it went (docs/metrics.md, "Load").
    pub load: RunLoad,
    /// Where the sampled decode steps' time went (`--profile`; docs/metrics.md, "Step
    /// profile"); absent without --profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<crate::metrics::profile::TurnProfile>,
    /// The answer scored against `--ref` (docs/metrics.md, "Per token and per answer");
    /// absent without --ref.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality: Option<crate::metrics::quality::AnswerScore>,
    /// Each answer token's own confidence and the answer's (`--confidence`; docs/metrics.md,
    /// "Per token and per answer"); absent without --confidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<RunConfidence>,
    /// The level --profile asked for, for the stderr table (the JSON has both).
    #[serde(skip)]
    pub profile_level: crate::metrics::profile::ProfileLevel,
    pub stamp: Stamp,
}

/// An answer's own confidence (`run --confidence`): per-token arrays in answer order, one
/// value per generated token, and the answer's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct RunConfidence {
    /// Why there are no figures (`null` when there are): sampling on the backend leaves no
    /// logits on the host.
    pub unavailable: Option<&'static str>,
    /// `null` for an answer of no tokens or without figures.
    pub summary: Option<crate::metrics::quality::AnswerConfidence>,
    /// Each chosen token's id and text.
    pub token: Vec<i32>,
    pub text: Vec<String>,
    /// The probability of each chosen token.
    pub p: Vec<f32>,
    /// The entropy of each token's distribution, nats.
    pub entropy: Vec<f32>,
    /// Each token's distribution's most likely tokens (`metrics::quality::TOP_K`), most
    /// likely first.
    pub top: Vec<Vec<crate::metrics::quality::TopToken>>,
}

impl RunConfidence {
    fn new(tokens: Option<Vec<crate::metrics::quality::TokenConfidence>>) -> Self {
        let Some(tokens) = tokens else {
            return Self {
                unavailable: Some("sampling ran on the backend: no logits reach the host (--sampling host gives them)"),
                ..Self::default()
            };
        };
        Self {
            unavailable: None,
            summary: crate::metrics::quality::AnswerConfidence::of(&tokens),
            token: tokens.iter().map(|t| t.token).collect(),
            text: tokens.iter().map(|t| t.text.clone()).collect(),
            p: tokens.iter().map(|t| t.p).collect(),
            entropy: tokens.iter().map(|t| t.entropy).collect(),
            top: tokens.into_iter().map(|t| t.top).collect(),
        }
    }

    /// The stderr line.
    fn line(&self) -> String {
        match (&self.summary, self.unavailable) {
            (_, Some(why)) => format!("confidence not available: {why}\n"),
            (None, None) => "confidence no answer tokens\n".to_string(),
            (Some(a), None) => format!("confidence {}\n", a.line()),
        }
    }
}

/// `run`'s time to ready: from the command's start (its flags read) to the engine's ready
/// event, and the engine's load stages inside it.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct RunLoad {
    pub ready_ms: f64,
    #[serde(flatten)]
    pub stages: crate::llama::model_info::LoadStages,
    /// The rest: the command's own start (settings, the cached bandwidth figure, the engine
    /// thread), and the engine's work between the stages (the template, the model's
    /// description).
    pub other_ms: f64,
}

impl RunLoad {
    pub(crate) fn new(ready_ms: f64, info: &ModelInfo) -> Self {
        let st = info.load_stages;
        Self {
            ready_ms,
            stages: st,
            other_ms: (ready_ms - st.checks_ms - st.weights_ms - st.context_ms).max(0.0),
        }
    }
}

impl RunReport {
    pub(crate) fn new(
        report: &TurnReport,
        info: &ModelInfo,
        settings: &Settings,
        load_before: Option<f64>,
        peaks: &crate::metrics::roofline::Peaks,
        load: RunLoad,
    ) -> Self {
        #[allow(unused_mut)]
        let mut metrics = report.timeline.summary();
        #[cfg(feature = "plant")]
        plant(&mut metrics);
        let (itl_p50_ms, itl_max_ms) = metrics.stall_gaps_ms().unzip();
        let warning = crate::bench::report::measurement_warning(
            info.synthetic,
            &crate::metrics::busy::BusySignals {
                threads: info.threads,
                load_before,
                load_after: crate::hw::load_average_1m(),
                itl_p50_ms,
                itl_max_ms,
            },
        );
        let bandwidth = peaks.placed(info.weight_bytes.as_ref(), info.n_layer, info.n_gpu_layers);
        let busy = crate::metrics::busy::busy_warnings(&crate::metrics::busy::BusySignals {
            threads: info.threads,
            load_before,
            load_after: crate::hw::load_average_1m(),
            itl_p50_ms,
            itl_max_ms,
        });
        let profile = report.profile.as_ref().and_then(|p| {
            let mut profile = p.figures(
                &report.timeline.pass_gaps(),
                metrics.tokens_per_pass.unwrap_or(1.0),
                crate::bench::profile::limits(bandwidth.as_ref().map(|b| b.bytes_per_s)),
            )?;
            profile.not_meaningful = crate::metrics::profile::shares_not_meaningful(&busy);
            Some(profile)
        });
        let roofline = info
            .bytes_per_token(report.context_used as u64)
            .zip(bandwidth)
            .map(|(bytes, bandwidth)| {
                crate::metrics::roofline::Figures::at(
                    &bandwidth,
                    bytes,
                    metrics.decode_tok_per_s,
                    metrics.tokens_per_pass,
                )
            });
        Self {
            text: report.text.clone(),
            prompt: (!report.prompt.text.is_empty()).then(|| report.prompt.text.clone()),
            thinking: report.thinking_text.clone(),
            stop_reason: report.stop_reason,
            metrics,
            token_ready_ms: report
                .timeline
                .token_ready_at
                .iter()
                .map(|d| crate::metrics::ms(*d))
                .collect(),
            context_used: report.context_used,
            llama_counters: report.llama_counters,
            host: report.host.summary(),
            sampler: report.sampler,
            sampling: (report.sampler != "server").then_some(report.sampling),
            spec: report.spec.as_ref().map(|s| s.summary()),
            roofline,
            warning,
            load,
            profile,
            quality: None,
            confidence: None,
            profile_level: crate::metrics::profile::ProfileLevel::default(),
            stamp: Stamp::new(info, &settings.sampling),
        }
    }
}

/// The server a local chat's or run's exported figures name: this machine, in-process.
pub(crate) const LOCAL_SERVER: (&str, u16) = ("local", 0);

pub(crate) fn run(args: &RunArgs, mut settings: Settings) -> Result<(), Failure> {
    let started = std::time::Instant::now();
    if let Some(url) = &args.remote.url {
        refuse_local_only(args)?;
        args.sampling.apply(&mut settings)?;
        return run_remote(args, url, &settings);
    }
    let (config, reference) = apply_local_flags(args, &mut settings)?;
    let conversation = Conversation::new(args, &settings, read_prompt(args)?);
    let log = TurnLog {
        report_file: open_report(args)?,
        ..TurnLog::default()
    };
    let load_before = crate::hw::load_average_1m();
    // The roofline's bandwidth, as the chat takes it.
    let peaks = crate::commands::model::peak_bandwidths(&settings);
    let model_name = config
        .model_path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let exports = RunExports::new(args, &model_name, LOCAL_SERVER)?;
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let mut engine = EngineHandle::spawn_exporting(config, events_tx, exports.counter())?;
    engine.set_confidence(args.confidence);
    let mut local = LocalRun {
        args,
        settings: &settings,
        started,
        reference,
        load_before,
        peaks,
        engine,
        show_progress: std::io::stderr().is_terminal() && !args.json,
        stdout_terminal: std::io::stdout().is_terminal(),
        stdout: std::io::stdout().lock(),
        thinking: ThinkingSink {
            terminal: std::io::stderr().is_terminal(),
            open: false,
        },
        conversation,
        log,
        info: None,
        load: None,
        request: None,
        confidence: None,
        scoring: None,
    };
    while let Some(event) = crate::engine::recv_paced(&mut events, local.pace()) {
        let (report, full) = match local.on_event(event)? {
            Step::Wait => continue,
            Step::ReaderGone => {
                local.engine.shutdown();
                return Ok(());
            }
            Step::Answered(report, full) => (report, *full),
        };
        let info = ready_info(local.info.as_ref())?;
        let turn = local.conversation.turn;
        if args.show_prompt {
            eprint!(
                "{}",
                crate::text::terminal_safe(&shown_prompt(&report.prompt.text, &full, info))
            );
        }
        local.log.record(args, turn, &report, &full)?;
        if turn < args.turns {
            local.conversation.next_turn(&report.text);
            say_turn_done(&mut local.stdout, args, turn, &full, info)?;
            local.log.reports.push(full);
            let request = local.conversation.request(args, &settings);
            local.request = Some(local.engine.send(local.engine.next_id(), request, None)?);
            continue;
        }
        args.trace
            .write(std::mem::take(&mut local.log.trace_events))?;
        local.log.reports.push(full);
        let written = print_reports(&mut local.stdout, args, &local.log.reports, info)?;
        quiet_on_closed_pipe(written.and_then(|()| local.stdout.flush()))?;
        local.engine.shutdown();
        return exports.send();
    }
    Err(Failure::new(FAILURE, "the engine stopped unexpectedly"))
}

/// A local run's flags applied in the order their errors are reported, then the engine's
/// configuration, the `--ref` model (a missing or unreadable reference is named before the
/// model loads) and speculation's warnings on stderr.
fn apply_local_flags(
    args: &RunArgs,
    settings: &mut Settings,
) -> Result<(crate::engine::EngineConfig, Option<std::path::PathBuf>), Failure> {
    args.model.apply(settings)?;
    args.sampling.apply(settings)?;
    args.spec.apply(settings)?;
    args.profile.apply(settings);
    args.trace.check_force(&[
        ("--report", args.report.is_some()),
        ("--otlp-file", args.otlp_file.is_some()),
    ])?;
    args.trace.check()?;
    let config = crate::commands::model::engine_config(settings)?;
    let reference = args.quality.resolve(None, &config.model_path)?;
    for w in spec_warnings(settings, &config.model_path) {
        eprintln!("warning: {w}");
    }
    Ok((config, reference))
}

/// A local run's conversation: the turn being answered and the messages its request sends.
/// With --turns it grows each turn by the answer and a user message of the same length
/// ("PROMPT (turn 02)"); with --resend every turn sends the first turn's messages again.
struct Conversation {
    prompt: String,
    /// The user's messages carry their turn's number (--turns without --resend).
    numbered: bool,
    resend: bool,
    first: Vec<crate::engine::ChatMessage>,
    messages: Vec<crate::engine::ChatMessage>,
    turn: u32,
}

impl Conversation {
    /// The first turn's conversation: the system prompt and the user's message.
    fn new(args: &RunArgs, settings: &Settings, prompt: String) -> Self {
        let mut conversation = Self {
            prompt,
            numbered: args.turns > 1 && !args.resend,
            resend: args.resend,
            first: Vec::new(),
            messages: Vec::new(),
            turn: 1,
        };
        conversation.messages =
            crate::commands::model::single_turn(settings, &conversation.user_message(1));
        conversation.first = conversation.messages.clone();
        conversation
    }

    /// The user's message of `turn`: the prompt, numbered when the conversation grows.
    fn user_message(&self, turn: u32) -> String {
        if self.numbered {
            format!("{} (turn {turn:02})", self.prompt)
        } else {
            self.prompt.clone()
        }
    }

    /// On to the next turn, after `answer`.
    fn next_turn(&mut self, answer: &str) {
        self.turn += 1;
        if self.resend {
            self.messages = self.first.clone();
        } else {
            self.messages.push(crate::engine::ChatMessage::new(
                crate::engine::Role::Assistant,
                answer.to_string(),
            ));
            self.messages.push(crate::engine::ChatMessage::new(
                crate::engine::Role::User,
                self.user_message(self.turn),
            ));
        }
    }

    /// The engine's request for this turn's messages.
    fn request(&self, args: &RunArgs, settings: &Settings) -> TurnRequest {
        TurnRequest {
            messages: self.messages.clone(),
            sampling: settings.sampling.clone(),
            max_tokens: settings.max_tokens,
            capture_first_logits: false,
            ignore_eos: args.ignore_eos,
            context_full: crate::engine::ContextFull::DropOldest,
        }
    }
}

/// What the finished turns leave: their reports (printed at the end), their trace events
/// (`--trace`, written at the end) and their `--report` lines (written as each finishes).
#[derive(Default)]
struct TurnLog {
    reports: Vec<RunReport>,
    trace_events: Vec<serde_json::Value>,
    /// The trace's clock starts at the first turn's submission; each turn sits at its own.
    trace_origin: Option<std::time::Instant>,
    report_file: Option<std::io::BufWriter<std::fs::File>>,
}

impl TurnLog {
    /// Keeps turn `turn`'s trace events (with --trace) and writes its `--report` line.
    fn record(
        &mut self,
        args: &RunArgs,
        turn: u32,
        report: &TurnReport,
        full: &RunReport,
    ) -> Result<(), Failure> {
        if args.trace.trace.is_some() {
            self.trace_origin = self.trace_origin.or(report.timeline.submitted_at);
            self.trace_events.extend(crate::metrics::trace::turn_events(
                turn,
                &format!("tokscope run · turn {turn}"),
                crate::metrics::trace::base(self.trace_origin, &report.timeline),
                &report.timeline,
                report.profile.as_ref(),
            ));
        }
        if let Some(file) = self.report_file.as_mut() {
            let line =
                serde_json::to_string(full).map_err(|e| Failure::new(FAILURE, e.to_string()))?;
            writeln!(file, "{line}")?;
            file.flush()?;
        }
        Ok(())
    }
}

/// What one engine event leaves the run loop with.
enum Step {
    /// Nothing to do but take the next event.
    Wait,
    /// The reader of stdout went away (`| head -1`): the run ends quietly.
    ReaderGone,
    /// An answer is whole: the engine's report and the run's (scored, with --ref).
    Answered(Box<TurnReport>, Box<RunReport>),
}

/// A local run while the engine answers: what it was asked (flags, settings, the reference,
/// the figures taken before the model loads), the engine, the conversation and the finished
/// turns, and the answer in flight with the parts that arrive before it is whole.
struct LocalRun<'a> {
    args: &'a RunArgs,
    settings: &'a Settings,
    started: std::time::Instant,
    reference: Option<std::path::PathBuf>,
    load_before: Option<f64>,
    peaks: crate::metrics::roofline::Peaks,
    engine: EngineHandle,
    show_progress: bool,
    stdout_terminal: bool,
    stdout: std::io::StdoutLock<'static>,
    /// Where the thinking goes unless --json: stderr (dimmed on a terminal), and whether its
    /// line is still open.
    thinking: ThinkingSink,
    conversation: Conversation,
    log: TurnLog,
    info: Option<ModelInfo>,
    load: Option<RunLoad>,
    request: Option<crate::engine::RequestId>,
    /// The answer's own confidence, sent just before its `Finished`.
    confidence: Option<Option<Vec<crate::metrics::quality::TokenConfidence>>>,
    /// A finished answer waiting for its score (`--ref`).
    scoring: Option<(Box<TurnReport>, RunReport)>,
}

impl LocalRun<'_> {
    /// While an answer is in flight, events are taken once per stream frame (as the chat takes
    /// them) so that the engine wakes nobody between two decodes; --token-lines promises each
    /// token the moment it arrives and is woken by each.
    fn pace(&self) -> Option<Duration> {
        (self.request.is_some() && !self.args.token_lines)
            .then_some(crate::engine::STREAM_FRAME_INTERVAL)
    }

    /// One engine event: the loading line, the model ready, a token on stdout, or a part of
    /// the answer in flight; a failure ends the run.
    fn on_event(&mut self, event: EngineEvent) -> Result<Step, Failure> {
        let args = self.args;
        match event {
            EngineEvent::Loading {
                stage,
                progress,
                read,
            } if self.show_progress => show_loading(stage, progress, read.as_ref()),
            EngineEvent::Ready(i) => self.on_ready(*i)?,
            EngineEvent::LoadFailed(e) => return Err(e.into()),
            EngineEvent::Token {
                request_id,
                index,
                text,
                ..
            } if Some(request_id) == self.request && !args.json => {
                let written =
                    write_token(&mut self.stdout, args, self.stdout_terminal, index, &text);
                if quiet_on_closed_pipe(written)? {
                    return Ok(Step::ReaderGone);
                }
            }
            EngineEvent::Thinking {
                request_id,
                span,
                text,
            } if Some(request_id) == self.request && !args.json => {
                self.thinking
                    .write(&text, span.ended_at.is_some(), args.raw);
            }
            EngineEvent::Confidence { request_id, tokens } if Some(request_id) == self.request => {
                self.confidence = Some(tokens);
            }
            EngineEvent::Finished { request_id, report } if Some(request_id) == self.request => {
                // A turn that ended while thinking: its line ends before the summary.
                self.thinking.write("", true, args.raw);
                return self.on_finished(report);
            }
            EngineEvent::Scored { request_id, score } if Some(request_id) == self.request => {
                if let Some((report, mut full)) = self.scoring.take() {
                    full.quality = Some(*score);
                    return Ok(Step::Answered(report, Box::new(full)));
                }
            }
            EngineEvent::Failed { request_id, error } if Some(request_id) == self.request => {
                return Err(error.into())
            }
            _ => {}
        }
        Ok(Step::Wait)
    }

    /// The model is ready: the loading line cleared, the template's note and a GPU-less CUDA
    /// build's note said, the time to ready kept, and the first turn's request sent.
    fn on_ready(&mut self, info: ModelInfo) -> Result<(), Failure> {
        if self.show_progress {
            eprint!("\r\x1b[2K");
        }
        if let Some(note) = info.template_note.as_ref().filter(|_| !self.args.json) {
            eprintln!("note: {}", crate::text::terminal_safe(note));
        }
        if let Some(line) = info.kv_cache_line().filter(|_| !self.args.json) {
            eprintln!("note: {line}");
        }
        // A CUDA build on a machine without a GPU says so, also with --json (stderr).
        if let Some(note) = crate::llama::gpu::no_gpu_note() {
            eprintln!("note: {note}");
        }
        self.load = Some(RunLoad::new(
            crate::metrics::ms(self.started.elapsed()),
            &info,
        ));
        let request = self.conversation.request(self.args, self.settings);
        self.request = Some(self.engine.send(self.engine.next_id(), request, None)?);
        self.info = Some(info);
        Ok(())
    }

    /// The answer is generated: its run report built, and with --ref its scoring asked for
    /// (the answer is whole once scored).
    fn on_finished(&mut self, report: Box<TurnReport>) -> Result<Step, Failure> {
        let info = ready_info(self.info.as_ref())?;
        let load = self.load.unwrap_or_else(|| RunLoad::new(0.0, info));
        let mut full = RunReport::new(
            &report,
            info,
            self.settings,
            self.load_before,
            &self.peaks,
            load,
        );
        full.profile_level = self.args.profile.profile.unwrap_or_default();
        full.confidence = self.confidence.take().map(RunConfidence::new);
        match &self.reference {
            Some(path) => {
                let id = self.engine.next_id();
                self.engine.score_last(id, path.clone())?;
                self.request = Some(id);
                self.scoring = Some((report, full));
                Ok(Step::Wait)
            }
            None => Ok(Step::Answered(report, Box::new(full))),
        }
    }
}

/// `run`'s thinking on stderr, as it streams: the answer alone goes to stdout, so that it can
/// be piped; the thinking, dimmed on a terminal, ends its line before the answer begins.
struct ThinkingSink {
    terminal: bool,
    /// Thinking text was written and its line not ended yet.
    open: bool,
}

impl ThinkingSink {
    /// A thinking token's text; `ended`: the span closed with it (or the turn ended).
    fn write(&mut self, text: &str, ended: bool, raw: bool) {
        let mut err = std::io::stderr().lock();
        if !text.is_empty() {
            let text = crate::text::for_output(text, self.terminal && !raw);
            // A closed stderr loses the thinking, never the answer.
            let _ = if self.terminal {
                write!(err, "\x1b[2m{text}\x1b[22m")
            } else {
                write!(err, "{text}")
            };
            self.open = !text.ends_with('\n');
        }
        if ended && self.open {
            let _ = writeln!(err);
            self.open = false;
        }
        let _ = err.flush();
    }
}

/// The model's description, which an answer cannot come before.
fn ready_info(info: Option<&ModelInfo>) -> Result<&ModelInfo, Failure> {
    info.ok_or_else(|| Failure::new(FAILURE, "engine finished before it was ready"))
}

/// The loading line on stderr: the stage, and within the weights llama.cpp's progress, the
/// read rate and the time left.
fn show_loading(
    stage: crate::engine::LoadStage,
    progress: f32,
    read: Option<&crate::metrics::LoadRead>,
) {
    match stage {
        crate::engine::LoadStage::Weights => eprint!(
            "\r\x1b[2K{}… {}",
            stage.words(),
            crate::metrics::LoadRead::describe(read, progress)
        ),
        _ => eprint!("\r\x1b[2K{} …", stage.words()),
    }
}

/// Between turns, unless --json: the answer's line ended on stdout (not with --token-lines)
/// and turn `turn`'s summary on stderr.
fn say_turn_done(
    stdout: &mut impl Write,
    args: &RunArgs,
    turn: u32,
    full: &RunReport,
    info: &ModelInfo,
) -> Result<(), Failure> {
    if !args.json {
        if !args.token_lines {
            writeln!(stdout)?;
        }
        eprint!(
            "turn {turn}: {}",
            crate::text::terminal_safe(&human_summary(full, info))
        );
    }
    Ok(())
}

/// `--confidence`, `--ref` and `--profile` read a local model; with `--url` they are refused
/// before anything is sent.
fn refuse_local_only(args: &RunArgs) -> Result<(), Failure> {
    args.quality.refuse_remote()?;
    args.profile.refuse_remote()?;
    if args.confidence {
        return Err(Failure::usage("--confidence reads a local model's logits (a server sends none): run it with -m MODEL.gguf",
        ));
    }
    if args.show_prompt {
        return Err(Failure::usage(
            "--show-prompt shows the prompt a local model is given; a server builds its own (llama-server shows it at POST /apply-template): run it with -m MODEL.gguf",
        ));
    }
    args.trace.check_force(&[
        ("--report", args.report.is_some()),
        ("--otlp-file", args.otlp_file.is_some()),
    ])?;
    args.trace.check()
}

/// `--show-prompt`'s block: the prompt between two rules that name its token count and its
/// template.
fn shown_prompt(prompt: &str, full: &RunReport, info: &ModelInfo) -> String {
    let note = info
        .template_note
        .as_deref()
        .map_or(String::new(), |n| format!("\n  ({n})"));
    format!(
        "── prompt: {} tokens, template {} ──{note}\n{prompt}\n── end of prompt ──\n",
        full.metrics.prompt_tokens, info.template
    )
}

/// `--report FILE`, created before the model loads (one JSON line per turn goes in).
fn open_report(args: &RunArgs) -> Result<Option<std::io::BufWriter<std::fs::File>>, Failure> {
    let Some(path) = &args.report else {
        return Ok(None);
    };
    // Never through a link, never waiting on a FIFO, an existing file only with --force
    // (fsx::Output's rule).
    let file = crate::fsx::Output::new(path, args.trace.force)
        .create_stream()
        .map_err(|e| Failure::usage(format!("--report: {e}")))?;
    Ok(Some(std::io::BufWriter::new(file)))
}

/// One token on stdout the moment it arrives: a JSON line with `--token-lines`, else its text.
fn write_token(
    stdout: &mut impl Write,
    args: &RunArgs,
    stdout_terminal: bool,
    index: usize,
    text: &str,
) -> std::io::Result<()> {
    if args.token_lines {
        // JSON with every unsafe character escaped: safe on a terminal too.
        let line = serde_json::json!({ "index": index, "text": text }).to_string();
        writeln!(stdout, "{}", crate::text::json_safe(&line))?;
    } else {
        // A hostile model must not reach the terminal's clipboard or title (OSC 52, OSC 0):
        // control characters are neutralised unless stdout is a pipe or file, or --raw asks
        // for the bytes.
        let text = crate::text::for_output(text, stdout_terminal && !args.raw);
        stdout.write_all(text.as_bytes())?;
    }
    stdout.flush()
}

/// The end of a run: with `--json` the last turn's report (every turn's, as an array, when
/// there were several) on stdout; else the last summary on stderr. The outer error is a report
/// that would not serialise; the inner one, stdout's.
fn print_reports(
    stdout: &mut impl Write,
    args: &RunArgs,
    reports: &[RunReport],
    info: &ModelInfo,
) -> Result<std::io::Result<()>, Failure> {
    let Some(last) = reports.last() else {
        return Ok(Ok(()));
    };
    if args.json {
        let json = if reports.len() > 1 {
            serde_json::to_string_pretty(reports)
        } else {
            serde_json::to_string_pretty(last)
        }
        .map_err(|e| Failure::new(FAILURE, e.to_string()))?;
        return Ok(writeln!(stdout, "{}", crate::text::json_safe(&json)));
    }
    let end = if args.token_lines {
        Ok(())
    } else {
        writeln!(stdout)
    };
    Ok(end.map(|()| eprint!("{}", crate::text::terminal_safe(&human_summary(last, info)))))
}

/// A planted error for the agreement check (test builds with the `plant` feature only):
/// `TOKSCOPE_PLANT_SCALE=decode:1.1` scales one reported figure (decode tok/s, prefill ms,
/// TTFT ms or the ITL percentiles) so that scripts/agreement.sh can show that it catches it.
#[cfg(feature = "plant")]
fn plant(metrics: &mut TurnSummary) {
    use crate::metrics::planted_factor;
    if let Some(f) = planted_factor("decode") {
        metrics.decode_tok_per_s = metrics.decode_tok_per_s.map(|v| v * f);
    }
    if let Some(f) = planted_factor("prefill") {
        metrics.prefill_ms *= f;
    }
    if let Some(f) = planted_factor("ttft") {
        metrics.ttft_ms = metrics.ttft_ms.map(|v| v * f);
    }
    if let (Some(f), Some(itl)) = (planted_factor("itl"), metrics.itl.as_mut()) {
        itl.p50_ms *= f;
        itl.p90_ms *= f;
        itl.p99_ms *= f;
        itl.mean_ms *= f;
    }
}

/// The largest prompt file `run -f` reads: far beyond any context window.
const PROMPT_FILE_LIMIT: u64 = 64 << 20;

/// The prompt from -p, -f, or stdin (`-p -`, or neither flag with stdin not a terminal).
pub(crate) fn read_prompt(args: &RunArgs) -> Result<String, Failure> {
    use std::io::Read;
    let from_stdin = || -> Result<String, Failure> {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Failure::usage(format!("could not read the prompt from stdin: {e}")))?;
        Ok(text)
    };
    let text = match (&args.prompt, &args.prompt_file) {
        (Some(p), _) if p == "-" => from_stdin()?,
        (Some(p), _) => p.clone(),
        (None, Some(file)) => {
            // A regular file within a size no context holds anyway: /dev/zero or a FIFO must
            // not hang the run or fill the memory (pipe text in through stdin instead).
            let bytes =
                crate::fsx::read_regular(file, PROMPT_FILE_LIMIT, "a prompt").map_err(|e| {
                    let message = match e {
                        crate::fsx::ReadError::Io { source, .. } => format!(
                            "could not read the prompt file {}: {source}",
                            file.display()
                        ),
                        refused => refused.to_string(),
                    };
                    Failure::usage(message)
                })?;
            String::from_utf8(bytes).map_err(|_| {
                Failure::usage(format!(
                    "the prompt file {} is not UTF-8 text",
                    file.display()
                ))
            })?
        }
        (None, None) if !std::io::stdin().is_terminal() => from_stdin()?,
        (None, None) => {
            return Err(Failure::usage(
                "no prompt: give -p TEXT, -f FILE, or pipe it in (`echo hi | tokscope run`)",
            ))
        }
    };
    if text.trim().is_empty() {
        return Err(Failure::usage("the prompt is empty"));
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
pub(crate) fn human_summary(r: &RunReport, info: &ModelInfo) -> String {
    let m = &r.metrics;
    let mut out = summary_head(r, info);
    out.push_str(&timing_lines(m));
    if let Some(th) = &m.thinking {
        out.push_str(&thinking_line(th));
    }
    if let Some(f) = &r.roofline {
        out.push_str(&roofline_lines(f, r.context_used));
    }
    out.push_str(&gap_lines(m));
    out.push_str(&host_lines(r));
    if let Some(sp) = &r.spec {
        out.push_str(&spec_line(sp));
    }
    out.push_str(&format!(
        "E2E      {:.1} ms · stop: {} · context {}/{}\n",
        m.e2e_ms,
        r.stop_reason.as_str(),
        r.context_used,
        info.n_ctx
    ));
    if let Some(q) = &r.quality {
        out.push_str(&quality_line(q));
    }
    if let Some(c) = &r.confidence {
        out.push_str(&c.line());
    }
    if let Some(p) = &r.profile {
        out.push_str(&crate::bench::profile::human(p, r.profile_level));
    }
    out
}

/// The summary's head: the model and where it runs, the kernels when speculation chose
/// them, the warnings, and the time to ready.
fn summary_head(r: &RunReport, info: &ModelInfo) -> String {
    let mut out = format!(
        "── {} ({}, {:.0}M params, {}) · {} · {} thread{} · template {}\n",
        info.file_name,
        info.architecture,
        info.n_params as f64 / 1e6,
        info.quantization,
        info.backend,
        info.threads,
        if info.threads == 1 { "" } else { "s" },
        info.template,
    );
    if info.kernels == "batch-invariant" {
        // Speculation's default kernels are not the user's: said where the figures are.
        out.push_str(&format!(
            "kernels  {}\n",
            crate::llama::invariant::KERNELS_NOTE
        ));
    }
    if let Some(w) = &r.warning {
        for part in w.split("; ") {
            out.push_str(&format!("!! {part}\n"));
        }
    }
    let l = &r.load;
    out.push_str(&format!(
        "load     ready {} after start · file checks {} · weights {} · context {} · other {}\n",
        crate::fmt::secs_of_ms(l.ready_ms),
        crate::fmt::secs_of_ms(l.stages.checks_ms),
        crate::fmt::secs_of_ms(l.stages.weights_ms),
        crate::fmt::secs_of_ms(l.stages.context_ms),
        crate::fmt::secs_of_ms(l.other_ms),
    ));
    out
}

/// The prompt, TTFT and decode lines.
fn timing_lines(m: &TurnSummary) -> String {
    let mut out = format!(
        "prompt   {} tokens ({} from cache) · prefill {:.1} ms · {} tok/s\n",
        m.prompt_tokens,
        m.cached_tokens,
        m.prefill_ms,
        crate::fmt::opt(m.prefill_tok_per_s, 1)
    );
    out.push_str(&format!(
        "TTFT     {} ms (template+tokenize {:.2} ms, prefill {:.1} ms, first sample {} ms)\n",
        crate::fmt::opt(m.ttft_ms, 1),
        m.template_tokenize_ms,
        m.prefill_ms,
        crate::fmt::opt(m.first_sample_ms, 2)
    ));
    out.push_str(&format!(
        "decode   {} tokens · {} tok/s · TPOT {} ms\n",
        m.tokens_generated,
        crate::fmt::opt(m.decode_tok_per_s, 1),
        crate::fmt::opt(m.tpot_ms, 2)
    ));
    out
}

/// The thinking line of a turn that thought before it answered (docs/metrics.md, "Thinking").
fn thinking_line(th: &crate::metrics::ThinkingSummary) -> String {
    if th.ended_while_thinking {
        return format!(
            "thinking {} tokens · ended while thinking (no answer)\n",
            th.thinking_tokens
        );
    }
    format!(
        "thinking {} tokens · {} ms · first answer token {} ms · answer {} tokens, {} tok/s\n",
        th.thinking_tokens,
        crate::fmt::opt(th.thinking_ms, 1),
        crate::fmt::opt(th.time_to_first_answer_ms, 1),
        th.answer_tokens,
        crate::fmt::opt(th.answer_tok_per_s, 1),
    )
}

/// The roofline line at the answer's final depth `context_used`, and the note when the
/// decode measured above its ceiling.
fn roofline_lines(f: &crate::metrics::roofline::Figures, context_used: usize) -> String {
    let mbu = f.mbu_pct.map_or_else(
        || "—".to_string(),
        |p| crate::metrics::roofline::mbu_pct_cell(p, 1),
    );
    let mut out = format!(
        "roofline ceiling {} tok/s ({} a token at depth {}) · MBU {mbu} · bandwidth {:.1} GB/s, {}\n",
        crate::fmt::opt(f.ceiling_tok_per_s, 1),
        crate::fmt::bytes_f64(f.bytes_per_token),
        context_used,
        f.bandwidth_bytes_per_s / 1e9,
        f.bandwidth_source,
    );
    if f.mbu_pct.is_some_and(|p| p > 100.0) {
        out.push_str(&format!(
            "         ↑ {}\n",
            crate::metrics::roofline::ABOVE_CEILING
        ));
    }
    out
}

/// The gaps between tokens (ITL) and, when speculating, between passes.
fn gap_lines(m: &TurnSummary) -> String {
    let mut out = String::new();
    out.push_str(&itl_line(m.itl.as_ref()));
    // A speculative pass delivers its accepted tokens at one time: the gaps between passes
    // beside the gaps between tokens.
    if let (Some(gap), Some(per_pass)) = (&m.pass_gap, m.tokens_per_pass.filter(|t| *t > 1.0)) {
        out.push_str(&format!(
            "passes   {} · {per_pass:.2} tokens a pass · gap mean {:.2} · p50 {:.2} · p90 {:.2} · max {:.2} ms\n",
            gap.count, gap.mean_ms, gap.p50_ms, gap.p90_ms, gap.max_ms
        ));
    }
    out
}

/// The ITL line, when there are gaps between tokens.
fn itl_line(itl: Option<&crate::metrics::LatencyStats>) -> String {
    itl.map_or_else(String::new, |itl| {
        format!(
            "ITL      mean {:.2} · p50 {:.2} · p90 {:.2} · p99 {:.2} · max {:.2} ms\n",
            itl.mean_ms, itl.p50_ms, itl.p90_ms, itl.p99_ms, itl.max_ms
        )
    })
}

/// The host's time per token between decodes and its parts, and where sampling ran.
fn host_lines(r: &RunReport) -> String {
    let h = &r.host;
    let mut out = format!(
        "host     {} µs/tok between decodes ({}: logits {} · sampling {}{} · detok+stop {} · event {} µs)\n",
        crate::fmt::opt(h.host_us_per_token, 1),
        r.sampler,
        crate::fmt::opt(h.logits_out_us, 1),
        crate::fmt::opt(h.sampling_us, 1),
        if r.confidence.is_some() {
            format!(" · confidence {}", crate::fmt::opt(h.confidence_us, 1))
        } else {
            String::new()
        },
        crate::fmt::opt(h.detokenize_stop_us, 1),
        crate::fmt::opt(h.event_metrics_us, 1),
    );
    if let Some(place) = &r.sampling {
        out.push_str(&format!(
            "sampling on the {} ({})\n",
            place.as_str(),
            place.why
        ));
    }
    out
}

/// The stderr line of an answer scored against `--ref`.
pub(crate) fn quality_line(q: &crate::metrics::quality::AnswerScore) -> String {
    if q.summary.is_none() {
        return format!("quality  {}\n", crate::metrics::quality::summary_line(q));
    }
    let loaded = if q.reference_load_ms > 0.0 {
        // As the status bar counts a model's: the layers llama.cpp offloaded, its output
        // layer among them.
        let placed = if q.reference_gpu_layers > 0 {
            format!(", GPU layers {}", q.reference_gpu_layers)
        } else {
            String::new()
        };
        format!(
            ", reference ({}{placed}) loaded in {}",
            crate::fmt::bytes(q.reference_file_bytes),
            crate::fmt::secs_of_ms(q.reference_load_ms)
        )
    } else {
        String::new()
    };
    format!(
        "quality  {} · scored after the answer in {}{loaded}\n",
        crate::metrics::quality::summary_line(q),
        crate::fmt::secs_of_ms(q.score_ms),
    )
}

/// The stderr line of speculative decoding's figures.
pub(crate) fn spec_line(sp: &crate::metrics::spec::SpecSummary) -> String {
    if let Some(why) = &sp.off_reason {
        return format!("spec     {} off: {why}\n", sp.mode);
    }
    let pct = |v: Option<f64>| crate::fmt::opt(v.map(|x| x * 100.0), 0);
    format!(
        "spec     {} k≤{} · accepted {}/{} ({}%, α {}%) · {} tok/pass · {} passes/tok · draft {} ms/step · verify {} ms/pass · speed-up expected {}× ({}× with the compute term, ρ {}) measured {}×\n",
        sp.mode,
        sp.draft_max,
        sp.accepted,
        sp.drafted,
        pct(sp.acceptance_rate),
        pct(sp.acceptance_per_token),
        crate::fmt::opt(sp.tokens_per_pass, 2),
        crate::fmt::opt(sp.passes_per_token, 2),
        crate::fmt::opt(sp.draft_ms_per_step, 2),
        crate::fmt::opt(sp.verify_ms_per_pass, 2),
        crate::fmt::opt(sp.expected_speedup, 2),
        crate::fmt::opt(sp.expected_speedup_compute, 2),
        crate::fmt::opt(sp.row_cost, 3),
        crate::fmt::opt(sp.measured_speedup, 2),
    ) + &sp
        .verdict
        .as_ref()
        .map_or_else(String::new, |v| format!("         {v}\n"))
}

/// Everything `run --url --json` prints. The key is never part of it.
#[derive(Debug, Serialize)]
pub(crate) struct RemoteRunReport {
    pub text: String,
    /// "done", "cancelled", or the error that ended the stream early.
    pub end: String,
    pub finish_reason: Option<String>,
    pub metrics: RemoteSummary,
    /// What the token counts are based on, in words.
    pub token_count_source: &'static str,
    /// Offset of each chunk with text (either channel) from the request, in ms.
    pub chunk_ms: Vec<f64>,
    /// What the server reported that could not be true and was ignored.
    pub notes: Vec<String>,
    pub server: ServerStamp,
}

#[derive(Debug, Serialize)]
pub(crate) struct ServerStamp {
    /// Scheme, host and port only.
    pub host: String,
    pub model: String,
    /// The client machine's CPU, where it can be read.
    pub client_cpu: Option<String>,
}

/// `tokscope run --url URL`.
pub(crate) fn run_remote(args: &RunArgs, url: &str, settings: &Settings) -> Result<(), Failure> {
    let endpoint = args.remote.endpoint(url)?;
    let exports = RunExports::new(args, "", endpoint.host_and_port())?;
    let prompt = read_prompt(args)?;
    let messages = crate::commands::model::single_turn(settings, &prompt);
    let rt = crate::commands::runtime()?;
    let client = RemoteClient::new(endpoint)?;
    let model_flag = args
        .model
        .model
        .as_ref()
        .map(|p| p.to_string_lossy().into_owned());
    let turn = rt.block_on(async {
        let rtt = client.probe_rtt().await?;
        let model = match model_flag {
            Some(m) => m,
            None => client.default_model().await?,
        };
        let request = ChatRequest {
            model: model.clone(),
            messages,
            max_tokens: Some(settings.max_tokens),
            temperature: Some(settings.sampling.temperature),
            top_p: Some(settings.sampling.top_p),
            seed: Some(settings.sampling.seed),
            ignore_eos: args.ignore_eos,
        };
        let mut on_text = remote_text_sink(args);
        let sleeping = client.sleeping().await;
        let mut turn = client
            .stream_chat(&request, Some(rtt), &|| false, &mut on_text)
            .await?;
        turn.timeline.server_sleeping = sleeping;
        Ok::<_, RemoteError>((turn, model))
    });
    let (turn, model) = turn?;
    args.trace.write(crate::metrics::trace::turn_events(
        1,
        &format!("tokscope run --url {}", client.endpoint().host_label()),
        Duration::ZERO,
        &turn.timeline.turn_timeline(),
        None,
    ))?;
    let report = remote_report(&turn, model, &client);
    print_remote_report(args, &report)?;
    if let Some(export) = exports.counter() {
        if let Ok(mut m) = export.metrics.lock() {
            m.set_model(&report.server.model);
            m.sent();
            match crate::remote::record(&turn) {
                Ok(r) => m.observe(&r.observed()),
                Err(e) => m.failed(&e.kind, turn.timeline.e2e()),
            }
        }
    }
    match turn.end {
        Ok(_) => exports.send(),
        Err(e) => {
            // The failure is the run's outcome; the export carries it all the same.
            if let Err(f) = exports.send() {
                eprintln!("{}", f.message);
            }
            Err(e.into())
        }
    }
}

/// `run --otlp` / `--otlp-file`: the figures the turns are counted into (on the engine thread
/// for a local model, as the chat counts them; from the streamed record for a server, as
/// `load` counts a request), sent once when the run ends. Its one level is "run".
struct RunExports {
    sinks: Vec<crate::load::publish::OtlpSink>,
    export: Option<crate::metrics::exposition::Export>,
}

impl RunExports {
    /// The flags read (a bad URL, an existing file without --force: said now, before the
    /// run), for `model` on `server`.
    fn new(
        args: &RunArgs,
        model: &str,
        (host, port): (impl Into<String>, u16),
    ) -> Result<Self, Failure> {
        let exporters = crate::load::publish::Exporters::new(
            None,
            args.otlp.as_deref(),
            args.otlp_file.as_deref(),
            args.trace.force,
        )
        .map_err(Failure::usage)?;
        let export = exporters.figures((host.into(), port)).map(|metrics| {
            if let Ok(mut m) = metrics.lock() {
                if !model.is_empty() {
                    m.set_model(model);
                }
                m.start_level("run", std::time::SystemTime::now());
            }
            crate::metrics::exposition::Export {
                metrics,
                counted: std::sync::Arc::new(tokio::sync::Notify::new()),
            }
        });
        Ok(Self {
            sinks: exporters.otlp,
            export,
        })
    }

    /// Where the turns are counted, when anything exports.
    fn counter(&self) -> Option<crate::metrics::exposition::Export> {
        self.export.clone()
    }

    /// Sends the figures to every sink; a failed one is the run's error (exit 1), named.
    fn send(&self) -> Result<(), Failure> {
        let Some(export) = &self.export else {
            return Ok(());
        };
        let rt = crate::commands::runtime()?;
        for sink in &self.sinks {
            rt.block_on(sink.export(&export.metrics)).map_err(|why| {
                Failure::new(
                    FAILURE,
                    format!("OTLP export to {} failed: {why}", sink.label()),
                )
            })?;
        }
        Ok(())
    }
}

/// Where `run --url` puts each streamed piece of text as it arrives, as a local model's
/// tokens go (the server's bytes neutralised alike): with --token-lines one JSON line per
/// chunk (the server's unit; a chunk may hold several tokens), indexed in arrival order; else
/// the text itself, unless --json holds it for the report.
fn remote_text_sink(args: &RunArgs) -> impl FnMut(&str, Duration) + Send + '_ {
    let mut stdout = std::io::stdout();
    let terminal = crate::text::stdout_is_terminal();
    let mut chunk = 0usize;
    move |text: &str, _at: Duration| {
        if args.token_lines || !args.json {
            let _ = write_token(&mut stdout, args, terminal, chunk, text);
            chunk += 1;
        }
    }
}

/// The report of one streamed answer from `client`'s server: how it ended, its figures and
/// chunk times, and the server (the model it named, else `model`, the one asked for).
fn remote_report(
    turn: &crate::remote::RemoteTurn,
    model: String,
    client: &RemoteClient,
) -> RemoteRunReport {
    let summary = turn.timeline.summary();
    RemoteRunReport {
        text: turn.text.clone(),
        end: match &turn.end {
            Ok(StreamEnd::Done) => "done".into(),
            Ok(StreamEnd::Cancelled) => "cancelled".into(),
            Err(e) => e.to_string(),
        },
        finish_reason: turn.finish_reason.clone(),
        token_count_source: summary.token_count_source.label(),
        chunk_ms: turn.timeline.chunks.iter().map(|c| ms(c.at)).collect(),
        notes: turn.notes.clone(),
        metrics: summary,
        server: ServerStamp {
            host: client.endpoint().host_label(),
            model: turn.model.clone().unwrap_or(model),
            client_cpu: crate::hw::cpu_name(),
        },
    }
}

/// `run --url`'s end: the report as JSON on stdout with --json; else the streamed text's
/// line ended (not with --token-lines) and the summary on stderr.
fn print_remote_report(args: &RunArgs, report: &RemoteRunReport) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let text = serde_json::to_string_pretty(report)
            .map_err(|e| Failure::new(FAILURE, e.to_string()))?;
        writeln!(stdout, "{}", crate::text::json_safe(&text))?;
    } else {
        if !args.token_lines {
            writeln!(stdout)?;
        }
        // The server's model name and notes are the server's bytes.
        eprint!(
            "{}",
            crate::text::terminal_safe(&remote_human_summary(report))
        );
    }
    stdout.flush()?;
    Ok(())
}

/// The stderr summary of `run --url`.
pub(crate) fn remote_human_summary(r: &RemoteRunReport) -> String {
    let m = &r.metrics;
    let opt_u = |v: Option<u64>| v.map_or("—".to_string(), |v| v.to_string());
    let mut out = format!("── {} · model {}\n", r.server.host, r.server.model);
    out.push_str(&format!(
        "prompt   {} tokens ({} from the server's cache)\n",
        opt_u(m.prompt_tokens),
        opt_u(m.server_cached_tokens)
    ));
    // The server's own part of TTFT: vLLM's queue and TTFT, else llama-server's prompt time.
    let parts: Vec<(&str, Option<f64>)> =
        if m.server_queue_ms.is_some() || m.server_first_token_ms.is_some() {
            vec![
                ("server queue", m.server_queue_ms),
                ("server TTFT", m.server_first_token_ms),
                ("transport + other", m.queue_transport_ms),
            ]
        } else {
            let load = m.server_load_ms.map(|l| ("server model load", Some(l)));
            load.into_iter()
                .chain([
                    ("server prompt", m.server_prompt_ms),
                    ("first step + transport", m.queue_transport_ms),
                ])
                .collect()
        };
    let parts: Vec<String> = parts
        .into_iter()
        .map(|(label, v)| format!("{label} {} ms", crate::fmt::opt(v, 1)))
        .collect();
    out.push_str(&format!(
        "TTFT     {} ms (network RTT {} ms, {})\n",
        crate::fmt::opt(m.ttft_ms, 1),
        crate::fmt::opt(m.network_rtt_ms, 2),
        parts.join(", ")
    ));
    if let Some(th) = m.thinking {
        let answer = if th.ended_while_thinking {
            "ended while thinking: no answer token".to_string()
        } else {
            format!(
                "first answer token (TTFO) at {} ms",
                crate::fmt::opt(th.time_to_first_answer_ms, 1)
            )
        };
        out.push_str(&format!(
            "thinking {} tokens in {} ms (TTFT above is its first) · {answer}\n",
            th.thinking_tokens,
            crate::fmt::opt(th.thinking_ms, 1),
        ));
    }
    out.push_str(&format!(
        "decode   {} tokens in {} chunks · {} tok/s · TPOT {} ms (server {} ms)\n",
        m.tokens_generated,
        m.chunks,
        crate::fmt::opt(m.decode_tok_per_s, 1),
        crate::fmt::opt(m.tpot_ms, 2),
        crate::fmt::opt(m.server_tpot_ms, 2),
    ));
    out.push_str(&format!("tokens   {}\n", r.token_count_source));
    if let Some(cold) = m.cold_start {
        out.push_str(&format!("cold     {}\n", cold.words()));
    }
    out.push_str(&format!(
        "server   {}\n",
        m.server_timing_source
            .map_or("no per-request times from the server (—)", |s| s.label())
    ));
    out.push_str(&itl_line(m.itl.as_ref()));
    out.push_str(&format!(
        "E2E      {:.1} ms to the last chunk with text · end: {}\n",
        m.e2e_ms, r.end
    ));
    let v = &m.vllm_convention;
    if v.ttft_ms.is_some() {
        out.push_str(&format!(
            "vLLM's   TTFT {} ms · TPOT {} ms · ITL p50 {} / p99 {} ms over {} chunk gaps · E2E {} ms to the last chunk with a choice (vllm bench serve's definitions)\n",
            crate::fmt::opt(v.ttft_ms, 1),
            crate::fmt::opt(v.tpot_ms, 2),
            crate::fmt::opt(v.itl.map(|i| i.p50_ms), 2),
            crate::fmt::opt(v.itl.map(|i| i.p99_ms), 2),
            v.itl.map_or(0, |i| i.count),
            crate::fmt::opt(v.e2e_ms, 1),
        ));
    }
    for note in &r.notes {
        out.push_str(&format!("note     {note}\n"));
    }
    out
}
