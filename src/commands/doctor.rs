//! `tokscope doctor`: checks of one part of a model against an independent reference.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::commands::{Failure, FAILURE};
use crate::doctor;
use crate::llama::gpu::GpuStatus;

/// `tokscope doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(subcommand)]
    pub check: DoctorCheck,
}

/// The checks `doctor` runs.
#[derive(Debug, Subcommand)]
pub enum DoctorCheck {
    /// Tokenize a corpus with llama.cpp (the GGUF's vocabulary) and with the tokenizers crate
    /// (a tokenizer.json); report the mismatch rate and the first mismatches side by side.
    /// Exits 1 when any sample differs.
    Tokenizer(TokenizerCheckArgs),
    /// What this build and machine can use: backends, devices, driver and CUDA versions,
    /// compute capability, the CUDA libraries loaded and from where, and why no GPU is used
    /// when none is. Exits 1 when a CUDA build finds no usable GPU.
    Gpu,
    /// The CPU memory-bandwidth probes cached for the roofline (per CPU and thread count, with
    /// the load they were taken at); --reprobe measures again.
    Bandwidth(BandwidthArgs),
    /// The chat's scoring path (`--ref`, Alt+K) over an evaluation text, cut as
    /// llama-perplexity --kl-divergence cuts it: the model's figures against the reference's
    /// (PPL, KLD mean/median/p99/max, same top %, Δp), for holding against llama-perplexity
    /// (scripts/compare-llama-perplexity.sh). `compare` computes the same figures by a path
    /// of its own.
    Scoring(Box<ScoringArgs>),
    /// The prompt a conversation becomes: the model's chat template rendered (its own Jinja
    /// template, as transformers and llama-server --jinja render it, unless --template says
    /// otherwise), with its token count and which template was used and why. Only the
    /// vocabulary is loaded.
    Template(TemplateArgs),
}

/// `tokscope doctor template`.
#[derive(Debug, Args)]
pub struct TemplateArgs {
    /// The GGUF model whose chat template is rendered.
    #[arg(short = 'm', long, value_name = "FILE")]
    pub model: PathBuf,
    /// Which template (as `chat --template`): auto, model, arch, completion, a name, or a
    /// Jinja template file.
    #[arg(long, value_name = "NAME|FILE")]
    pub template: Option<String>,
    /// The conversation as a JSON array of messages, `[{"role": "system"|"user"|"assistant",
    /// "content": "…"}, …]` (`-` reads stdin). The prompt ends with the assistant's header.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["prompt", "system"])]
    pub messages: Option<PathBuf>,
    /// One user message [default: "Hello"].
    #[arg(short = 'p', long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// A system message before the user's.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// One JSON object: template, template_note, prompt, prompt_tokens, tokens.
    #[arg(long)]
    pub json: bool,
}

/// `tokscope doctor scoring`.
#[derive(Debug, Args)]
pub struct ScoringArgs {
    #[command(flatten)]
    pub model: crate::commands::flags::ModelArgs,
    /// The reference model the model is scored against (same vocabulary).
    #[arg(long = "ref", value_name = "FILE")]
    pub reference: PathBuf,
    /// The evaluation text (default: the built-in one, as `compare`'s). -c sets the tokens per
    /// chunk [default: 512].
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// At most this many chunks (default: all the text holds).
    #[arg(long, value_name = "N")]
    pub chunks: Option<u32>,
    /// How the passes are cut: `pieces` (the chat's: 32 answer positions a pass, memory
    /// bounded) or `whole` (llama-perplexity's: each chunk in one decode).
    #[arg(long, value_name = "HOW", default_value = "pieces", value_parser = ["pieces", "whole"])]
    pub passes: String,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `tokscope doctor bandwidth`.
#[derive(Debug, Args)]
pub struct BandwidthArgs {
    /// Measure again before listing (a probe on a busy machine is not cached).
    #[arg(long)]
    pub reprobe: bool,
    /// With --reprobe: the thread counts to measure, a comma list (default: every one cached
    /// for this CPU, else all cores).
    #[arg(short = 't', long, value_name = "N,…", value_delimiter = ',')]
    pub threads: Vec<usize>,
}

/// `tokscope doctor tokenizer`.
#[derive(Debug, Args)]
pub struct TokenizerCheckArgs {
    /// The GGUF model whose vocabulary is checked (only the vocabulary is loaded).
    #[arg(short = 'm', long, value_name = "FILE")]
    pub model: PathBuf,
    /// The reference: a Hugging Face tokenizer.json.
    #[arg(long, value_name = "FILE")]
    pub tokenizer: PathBuf,
    /// A text file to check instead of the built-in corpus (checked whole and line by line).
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// How many mismatches to show side by side.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub show: usize,
}

/// Runs `tokscope doctor`.
pub(crate) fn run(
    args: &DoctorArgs,
    settings: impl FnOnce() -> Result<crate::config::Settings, crate::config::ConfigError>,
) -> Result<(), Failure> {
    match &args.check {
        DoctorCheck::Scoring(args) => scoring(args, settings()?),
        DoctorCheck::Tokenizer(args) => tokenizer(args),
        DoctorCheck::Template(args) => template(args),
        DoctorCheck::Gpu => gpu(),
        DoctorCheck::Bandwidth(args) => {
            if !args.reprobe && !args.threads.is_empty() {
                return Err(Failure::usage("-t goes with --reprobe"));
            }
            if args.threads.contains(&0) {
                return Err(Failure::usage("-t: a thread count is at least 1"));
            }
            let report = crate::hw::bandwidth_report(args.reprobe.then_some(&args.threads[..]));
            print!("{}", crate::text::terminal_safe(&report));
            Ok(())
        }
    }
}

/// `tokscope doctor gpu`; exits 1 when a CUDA build finds no usable GPU.
fn gpu() -> Result<(), Failure> {
    let (report, status) = doctor::gpu::report();
    print!("{report}");
    match status {
        GpuStatus::NoDriver | GpuStatus::NoDevice { .. } | GpuStatus::DriverTooOld { .. } => {
            Err(Failure::new(FAILURE, status.note().unwrap_or_default()))
        }
        _ => Ok(()),
    }
}

fn tokenizer(args: &TokenizerCheckArgs) -> Result<(), Failure> {
    let samples = match &args.text {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(format!("cannot read {} as UTF-8 text: {e}", path.display()))
            })?;
            let label = path
                .file_name()
                .map_or_else(|| "text".to_owned(), |n| n.to_string_lossy().into_owned());
            doctor::samples_from_text(&label, &text)
        }
        None => doctor::builtin_corpus(),
    };
    let model = crate::tokcount::load_vocab_only(&args.model)?;
    let reference = crate::synth::llama3::open_tokenizer(&args.tokenizer)
        .map_err(|e| Failure::usage(e.to_string()))?;
    let comparison = doctor::compare(&model, &reference, &samples);
    print!(
        "{}",
        doctor::render_report(&comparison, &args.model, &args.tokenizer, args.show)
    );
    if comparison.mismatches.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(
            FAILURE,
            format!(
                "tokenizer check failed: {} of {} samples tokenize differently ({:.1}%)",
                comparison.mismatches.len(),
                comparison.samples,
                comparison.mismatch_rate() * 100.0
            ),
        ))
    }
}

/// The conversation `doctor template` renders: `--messages`, or `--system` and `-p`.
fn template_messages(args: &TemplateArgs) -> Result<Vec<crate::engine::ChatMessage>, Failure> {
    use crate::engine::{ChatMessage, Role};
    let Some(path) = &args.messages else {
        let system = args
            .system
            .iter()
            .map(|s| ChatMessage::new(Role::System, s));
        let user = ChatMessage::new(Role::User, args.prompt.as_deref().unwrap_or("Hello"));
        return Ok(system.chain([user]).collect());
    };
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    let messages: Vec<ChatMessage> = serde_json::from_str(&text).map_err(|e| {
        Failure::usage(format!(
            "{}: not a JSON array of messages ({e}); each is {{\"role\": \"system\"|\"user\"|\"assistant\", \"content\": \"…\"}}",
            path.display()
        ))
    })?;
    if messages.is_empty() {
        return Err(Failure::usage(format!(
            "{}: the conversation has no message",
            path.display()
        )));
    }
    Ok(messages)
}

/// `tokscope doctor template`: the prompt the engine would give the model for a conversation,
/// built by the engine's own prompt builder (`engine::PromptBuilder`).
fn template(args: &TemplateArgs) -> Result<(), Failure> {
    let choice = match &args.template {
        Some(t) => t
            .parse::<crate::engine::TemplateChoice>()
            .map_err(|e| Failure::usage(format!("--template: {e}")))?,
        None => crate::engine::TemplateChoice::default(),
    };
    let messages = template_messages(args)?;
    let model = crate::tokcount::load_vocab_only(&args.model)?;
    let builder = crate::engine::PromptBuilder::new(&model, &choice)?;
    let (tokens, prompt) = builder.tokenize_messages(&messages)?;
    if args.json {
        let json = serde_json::json!({
            "template": builder.label,
            "template_note": builder.note,
            "prompt": prompt,
            "prompt_tokens": tokens.len(),
            "tokens": tokens.iter().map(|t| t.0).collect::<Vec<_>>(),
        });
        println!("{}", crate::text::json_safe(&json.to_string()));
        return Ok(());
    }
    eprintln!(
        "template: {}{}\nprompt: {} tokens",
        builder.label,
        builder
            .note
            .as_deref()
            .map_or(String::new(), |n| format!(" ({n})")),
        tokens.len()
    );
    print!("{}", crate::text::terminal_safe(&prompt));
    if !prompt.ends_with('\n') {
        println!();
    }
    Ok(())
}

/// `tokscope doctor scoring`: the model scored against `--ref` over the text through the
/// engine's scoring path (`EngineCommand::ScoreText`), its figures summed as `compare` sums
/// its own (`metrics::quality::Accumulator`).
fn scoring(args: &ScoringArgs, mut settings: crate::config::Settings) -> Result<(), Failure> {
    use crate::engine::{EngineEvent, EngineHandle};
    if args.model.n_ctx.is_none() {
        settings.engine.n_ctx = 512;
    }
    args.model.apply(&mut settings)?;
    let n_ctx = settings.engine.n_ctx;
    if n_ctx < 8 {
        return Err(Failure::usage(format!(
            "-c {n_ctx}: a chunk is at least 8 tokens"
        )));
    }
    if args.chunks == Some(0) {
        return Err(Failure::usage("--chunks: at least 1"));
    }
    let (text_name, text) = crate::compare::load_text(args.text.as_deref())
        .map_err(crate::commands::compare::failure)?;
    let config = crate::commands::model::engine_config(&settings)?;
    let reference = crate::commands::flags::QualityArgs {
        reference: Some(args.reference.clone()),
    }
    .resolve(None, &config.model_path)?
    .unwrap_or_else(|| args.reference.clone());
    let model_path = config.model_path.clone();
    let chunking = crate::metrics::quality::Chunking {
        n_ctx,
        max_chunks: args.chunks,
    };
    let (mut engine, mut events) = EngineHandle::spawn(config)?;
    let mut request = None;
    let score = loop {
        match crate::engine::recv_paced(&mut events, None) {
            Some(EngineEvent::Ready(_)) => {
                let id = engine.next_id();
                let passes = match args.passes.as_str() {
                    "whole" => crate::engine::Passes::Whole,
                    _ => crate::engine::Passes::Pieces,
                };
                engine.score_text(id, reference.clone(), text.clone(), chunking, passes)?;
                request = Some(id);
            }
            Some(EngineEvent::LoadFailed(e)) => return Err(e.into()),
            Some(EngineEvent::Scored { request_id, score }) if Some(request_id) == request => {
                break score;
            }
            Some(EngineEvent::Failed { request_id, error }) if Some(request_id) == request => {
                return Err(match error {
                    // Too short for its chunks: the text or -c is the user's to change.
                    crate::engine::EngineError::EvalText(m) => Failure::usage(m),
                    e => e.into(),
                });
            }
            Some(_) => {}
            None => return Err(crate::engine::EngineError::EngineGone.into()),
        }
    };
    engine.shutdown();
    let mut acc = crate::metrics::quality::Accumulator::default();
    for t in &score.tokens {
        acc.add(&t.score);
    }
    let stats = acc.stats(true);
    let per_chunk = n_ctx as usize - (n_ctx as usize / 2 + 1);
    let chunks = score.tokens.len() / per_chunk.max(1);
    let report = serde_json::json!({
        "model": model_path.display().to_string(),
        "reference": reference.display().to_string(),
        "text": text_name,
        "n_ctx": n_ctx,
        "chunks": chunks,
        "passes": args.passes,
        "quality": stats,
        "score_ms": score.score_ms,
        "reference_load_ms": score.reference_load_ms,
    });
    if args.json {
        println!("{}", crate::text::json_safe(&report.to_string()));
    } else {
        print!(
            "{}",
            crate::text::terminal_safe(&doctor::scoring_report(
                &model_path.display().to_string(),
                &reference.display().to_string(),
                &text_name,
                n_ctx,
                chunks,
                &stats
            ))
        );
    }
    Ok(())
}
