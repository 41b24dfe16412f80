//! `tokscope chat` (also the bare `tokscope`): the TUI on the configured (or demo) model, or,
//! with `--url` (config `remote.url`), on an OpenAI-compatible server: the same chat driven by
//! the remote backend (`remote::spawn`), which speaks the engine's protocol.

use std::io::IsTerminal;

use clap::Args;

use super::flags::{ModelArgs, SamplingArgs};
use super::model::engine_config;
use crate::commands::Failure;
use crate::config::Settings;

#[derive(Debug, Args, Default)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub spec: super::run::SpecArgs,
    #[command(flatten)]
    pub profile: super::profile::ProfileArgs,
    /// Continue a saved conversation: its id (or a unique prefix), or the latest without one.
    /// It reloads the model it last ran on when that file is unchanged (-m overrides);
    /// otherwise it says why and uses the default model.
    #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "")]
    pub resume: Option<String>,
    /// Generate exactly --max-tokens per answer, ignoring end-of-generation tokens and stop
    /// strings (for measuring decode speed in the chat).
    #[arg(long)]
    pub ignore_eos: bool,
    /// When the conversation no longer fits the context (-c): `drop-oldest` (the default)
    /// leaves the oldest messages out so the kept part fills half the context and says how
    /// many; `stop` generates nothing, leaves nothing out and says what to do. `/context-full`
    /// changes it in the chat
    #[arg(long, value_name = "POLICY", value_parser = parse_context_full)]
    pub context_full: Option<crate::engine::ContextFull>,
    #[command(flatten)]
    pub remote: super::flags::RemoteArgs,
    #[command(flatten)]
    pub quality: super::flags::QualityArgs,
    /// Serve each turn's figures at http://ADDR/metrics while the chat runs, as `load
    /// --prometheus` does (Prometheus text; vLLM's names with `tokscope:` for `vllm:`, vLLM's
    /// bucket bounds, level "chat"; a local model's turns as server "local"), e.g.
    /// 127.0.0.1:9464 (port 0: any free one, shown in the chat)
    #[arg(long, value_name = "ADDR")]
    pub prometheus: Option<String>,
    /// Send OpenTelemetry GenAI client metrics after each turn, as `load --otlp` does
    /// (OTLP/HTTP JSON to this collector URL; http://HOST:4318 gets /v1/metrics)
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Write the same OTLP export requests to this file, one JSON line each
    #[arg(long, value_name = "PATH")]
    pub otlp_file: Option<std::path::PathBuf>,
    /// Overwrite an existing --otlp-file
    #[arg(long, requires = "otlp_file")]
    pub force: bool,
}

/// `tokscope chat`: the TUI on the configured (or demo) model.
pub(crate) fn run(args: &ChatArgs, mut settings: Settings) -> Result<(), Failure> {
    if let Some(url) = args.remote.url.clone().or(settings.remote.url.clone()) {
        args.profile.refuse_remote()?;
        args.quality.refuse_remote()?;
        // `-m` names the server's model; the context flags are for a local `/ab FILE`.
        args.model.apply(&mut settings)?;
        args.sampling.apply(&mut settings)?;
        return run_remote(args, &url, settings);
    }
    args.model.apply(&mut settings)?;
    args.sampling.apply(&mut settings)?;
    args.spec.apply(&mut settings)?;
    args.profile.apply(&mut settings);
    let (conversation, save_slot, mut notices, resumed_on) = open_conversation(args, &settings)?;
    if let Some(choice) = &resumed_on {
        resume_on(choice, args, &mut settings, &mut notices)?;
    }
    let config = engine_config(&settings)?;
    // The flag's reference is named before anything loads; the config's, when it is gone, is
    // said and left off (the chat still starts).
    let reference = match args
        .quality
        .resolve(settings.reference.as_deref(), &config.model_path)
    {
        Err(e) if args.quality.reference.is_none() => {
            notices.push(format!(
                "warning: config [quality] ref: {}; answers are not scored",
                e.message
            ));
            None
        }
        resolved => resolved?,
    };
    need_terminal()?;
    notices.extend(
        super::run::spec_warnings(&settings, &config.model_path)
            .into_iter()
            .map(|w| format!("warning: {w}")),
    );
    let mut app = new_app(args, &settings, &config, conversation);
    app.reference = reference;
    app.price_per_hour_usd = settings.price_per_gpu_hour_usd;
    app.profile.rate = settings.engine.profile_rate;
    // Before the engine starts loading, and before the screen opens: the seconds of a first
    // start are said, not a blank wait.
    app.bandwidth = crate::commands::model::peak_bandwidths(&settings);
    // A ceiling measured on a busy machine is this session's only: the status line says so,
    // as `run` and `bench` warn.
    if let Some(cpu) = &app.bandwidth.cpu {
        let label = cpu.source.label();
        if label.contains("busy machine") || label.contains("-thread figure") {
            notices.push(format!(
                "the bandwidth ceiling was measured on a busy machine or reads low (F1 or `tokscope doctor bandwidth`): MBU may read high; {}",
                crate::metrics::busy::RERUN
            ));
        }
    }
    let (events_tx, events) = tokio::sync::mpsc::unbounded_channel();
    // The same exporters as a remote chat's, the turns counted on the engine thread; the
    // server is this machine, the model the file.
    let model_name = config
        .model_path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let exporters = exporters(args, &model_name, super::run::LOCAL_SERVER, &events_tx)?;
    if let Some(addr) = exporters.as_ref().and_then(|(beside, _)| beside.addr) {
        notices.push(metrics_notice(addr));
    }
    let engine = crate::engine::EngineHandle::spawn_exporting(
        config.clone(),
        events_tx.clone(),
        exporters.as_ref().map(|(_, export)| export.clone()),
    )?;
    let backends = crate::tui::Backends {
        events: events_tx,
        remote_chat: false,
        timeout: args.remote.endpoint_timeout()?,
    };
    serve(app, engine, events, backends, config, save_slot, notices)
}

/// `tokscope chat --url URL`: the same chat against an OpenAI-compatible server.
fn run_remote(args: &ChatArgs, url: &str, settings: Settings) -> Result<(), Failure> {
    // The key's variable: the flags', else config `remote.api_key_env`.
    let mut remote = args.remote.clone();
    if remote.api_key_env.is_none() && remote.api_key_file.is_none() {
        remote.api_key_env = settings.remote.api_key_env.clone();
    }
    let endpoint = remote.endpoint(url)?;
    let timeout = endpoint.timeout;
    let model = args
        .model
        .model
        .as_ref()
        .map(|p| p.to_string_lossy().into_owned())
        .or(settings.remote.model.clone());
    let (events_tx, events) = tokio::sync::mpsc::unbounded_channel();
    // Listening first: a port in use, a bad URL or path is said before the screen opens.
    let exporters = exporters(args, "", endpoint.host_and_port(), &events_tx)?;
    need_terminal()?;
    // The server's model is the one the flags or config name, whatever the conversation ran on.
    let (conversation, save_slot, mut notices, _) = open_conversation(args, &settings)?;
    if let Some(addr) = exporters.as_ref().and_then(|(beside, _)| beside.addr) {
        notices.push(metrics_notice(addr));
    }
    let config = crate::engine::EngineConfig {
        model_path: std::path::PathBuf::from(&endpoint.base_url),
        settings: settings.engine.clone(),
    };
    let mut app = new_app(args, &settings, &config, conversation);
    // The server's hour costs the GPU-hour price once per GPU it runs on.
    app.price_per_hour_usd =
        settings.price_per_gpu_hour_usd * f64::from(settings.remote.gpus.unwrap_or(1));
    // The server's bandwidth only from config: never this machine's probe.
    app.bandwidth =
        crate::metrics::roofline::Peaks::configured(settings.remote.bandwidth_gb_s.map(|gb_s| {
            crate::metrics::roofline::Bandwidth {
                bytes_per_s: gb_s * 1e9,
                source: crate::metrics::roofline::BandwidthSource::Config,
            }
        }));
    let facts = crate::remote::ServerFacts {
        weights_bytes: settings
            .remote
            .weights_gb
            .map(|gb| (gb * 1e9).round() as u64),
    };
    let main = crate::remote::Main {
        endpoint,
        model,
        facts,
        exposition: exporters.as_ref().map(|(_, export)| crate::remote::Export {
            metrics: std::sync::Arc::clone(&export.metrics),
            counted: std::sync::Arc::clone(&export.counted),
        }),
    };
    let engine = crate::remote::spawn(Some(main), timeout, events_tx.clone())?;
    let backends = crate::tui::Backends {
        events: events_tx,
        remote_chat: true,
        timeout,
    };
    serve(app, engine, events, backends, config, save_slot, notices)
}

/// Runs the chat loop on `engine` (local or remote), then shuts the engine down whatever the
/// loop's outcome, and turns how the chat ended into the exit.
fn serve(
    app: crate::app::App,
    mut engine: crate::engine::EngineHandle,
    events: crate::engine::EventReceiver,
    backends: crate::tui::Backends,
    config: crate::engine::EngineConfig,
    save_slot: crate::history::SaveSlot,
    notices: Vec<String>,
) -> Result<(), Failure> {
    // One notice line shows at a time: all of them, in order, rather than only the last.
    let notices = (!notices.is_empty()).then(|| notices.join("; "));
    let result = crate::tui::run_chat(
        app,
        &mut engine,
        events,
        backends,
        config,
        save_slot,
        notices.into_iter().collect(),
    );
    engine.shutdown();
    let (app, end) = result?;
    chat_end(&app, end)
}

/// Where the chat's own figures are served, as a notice.
fn metrics_notice(addr: std::net::SocketAddr) -> String {
    format!("tokscope's own figures: http://{addr}/metrics (Prometheus text)")
}

/// The chat's exporters (`--prometheus`, `--otlp`, `--otlp-file`), started on a thread of
/// their own, with where the turns are counted for them (`model` on `server`: the file on
/// [`super::run::LOCAL_SERVER`], or a remote endpoint whose worker names the model); `None` when none is
/// asked for. A failed export is said in the chat, once.
fn exporters(
    args: &ChatArgs,
    model: &str,
    (host, port): (impl Into<String>, u16),
    events: &crate::engine::EventSender,
) -> Result<Option<(crate::load::publish::Beside, crate::remote::Export)>, Failure> {
    use crate::load::publish;
    let exporters = publish::Exporters::new(
        args.prometheus.as_deref(),
        args.otlp.as_deref(),
        args.otlp_file.as_deref(),
        args.force,
    )
    .map_err(Failure::usage)?;
    let Some(metrics) = exporters.figures((host.into(), port)) else {
        return Ok(None);
    };
    if let Ok(mut m) = metrics.lock() {
        if !model.is_empty() {
            m.set_model(model);
        }
        m.start_level("chat", std::time::SystemTime::now());
    }
    let events = events.clone();
    let failed = Box::new(move |why: String| {
        let _ = events.send(crate::engine::EngineEvent::Warning(format!(
            "{why}; the chat goes on, later exports carry every turn"
        )));
    });
    let beside = publish::serve_beside(exporters, std::sync::Arc::clone(&metrics), failed)
        .map_err(Failure::usage)?;
    let export = crate::remote::Export {
        metrics,
        counted: std::sync::Arc::clone(&beside.counted),
    };
    Ok(Some((beside, export)))
}

/// The chat's state as both kinds of chat start it: the conversation, the sampling and the
/// flags that apply to either.
fn new_app(
    args: &ChatArgs,
    settings: &Settings,
    config: &crate::engine::EngineConfig,
    conversation: crate::app::conversation::Conversation,
) -> crate::app::App {
    let mut app = crate::app::App::new(
        config.model_path.clone(),
        conversation,
        settings.sampling.clone(),
        settings.max_tokens,
    );
    app.ignore_eos = args.ignore_eos;
    app.context_full = args.context_full.unwrap_or_default();
    app.clipboard_blocked = crate::tui::clipboard_blocked();
    app.model_dirs = settings.model_dirs.clone();
    app
}

fn parse_context_full(s: &str) -> Result<crate::engine::ContextFull, String> {
    s.parse()
}

fn need_terminal() -> Result<(), Failure> {
    if !std::io::stdout().is_terminal() {
        return Err(Failure::usage(
            "the chat needs a terminal; use `tokscope run -p TEXT` for headless use",
        ));
    }
    match crate::tui::unsupported_term(std::env::var_os("TERM").as_deref()) {
        Some(why) => Err(Failure::usage(why)),
        None => Ok(()),
    }
}

/// How the chat's end is told: a quit with every turn saved is success; a quit the user
/// confirmed with turns that could not be saved is exit 1 with why, so that a script or the
/// shell's status line shows that something was lost; a signal is 128 + its number.
fn chat_end(app: &crate::app::App, end: crate::tui::ChatEnd) -> Result<(), Failure> {
    match (end, &app.unsaved) {
        (crate::tui::ChatEnd::Quit, None) => Ok(()),
        (crate::tui::ChatEnd::Quit, Some(why)) => Err(Failure::new(
            crate::commands::FAILURE,
            format!(
                "quit with the conversation not saved ({why}): its latest turns are not in \
                 `tokscope history`"
            ),
        )),
        (crate::tui::ChatEnd::Signal(sig), None) => Err(Failure::new(
            128 + sig,
            format!("stopped by signal {sig}; every finished turn is saved (`tokscope history`)"),
        )),
        (crate::tui::ChatEnd::Signal(sig), Some(why)) => Err(Failure::new(
            128 + sig,
            format!("stopped by signal {sig}; the conversation could not be saved ({why})"),
        )),
    }
}

/// The model a resumed conversation continues on: the one it last ran on when that file is
/// there and unchanged (unless `-m` names another), else the default; the first notice (the
/// "resumed ID (N turns)" one) says which and why.
fn resume_on(
    choice: &crate::history::ResumeModel,
    args: &ChatArgs,
    settings: &mut Settings,
    notices: &mut Vec<String>,
) -> Result<(), Failure> {
    use crate::history::ResumeModel;
    let name = |p: &std::path::Path| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    // Saved paths are absolute; `-m` may be relative to here.
    let same_file = |saved: &std::path::Path, asked: &std::path::Path| {
        std::path::absolute(asked).is_ok_and(|asked| asked == saved)
    };
    let note = match (choice, args.model.model.as_deref()) {
        (ResumeModel::Saved(saved), Some(asked)) if !same_file(saved, asked) => Some(format!(
            "it ran on {}: continuing on {} as -m asks",
            saved.display(),
            asked.display()
        )),
        (ResumeModel::Saved(_), Some(_)) => None,
        (ResumeModel::Default { why: Some(why) }, Some(asked)) => Some(format!(
            "{why}: continuing on {} as -m asks",
            asked.display()
        )),
        (ResumeModel::Default { why: None }, _) => None,
        (ResumeModel::Saved(saved), None) => {
            settings.model = Some(saved.clone());
            Some(format!("on {}, the model it ran on", name(saved)))
        }
        (ResumeModel::Default { why: Some(why) }, None) => {
            let default = super::model::resolve_model(settings).map_err(|f| {
                Failure::new(
                    f.code,
                    format!("cannot resume on another model: {why}; {}", f.message),
                )
            })?;
            Some(format!(
                "{why}: continuing on the default model {} (earlier answers keep their \
                 figures, without this model's roofline)",
                default.display()
            ))
        }
    };
    if let Some(note) = note {
        // "resumed ID (N turns) on FILE, …", else "resumed ID (N turns); why: …".
        match notices.first_mut() {
            Some(first) if note.starts_with("on ") => first.push_str(&format!(" {note}")),
            _ => notices.insert(1.min(notices.len()), note),
        }
    }
    Ok(())
}

/// A conversation opened for the chat: the conversation, where it is saved, the notices
/// (resuming: "resumed ID (N turns)" first) and, resuming, what the saved model allows.
type Opened = (
    crate::app::conversation::Conversation,
    crate::history::SaveSlot,
    Vec<String>,
    Option<crate::history::ResumeModel>,
);

/// A new conversation, or the saved one `--resume` names, with where it is saved and the
/// notices resuming it gave.
fn open_conversation(args: &ChatArgs, settings: &Settings) -> Result<Opened, Failure> {
    let history_dir = crate::history::history_dir(&crate::paths::data_dir());
    // Temp files of saves killed with `kill -9` (older than a minute) are removed.
    crate::history::remove_stale_temps(&history_dir);
    // Answers a crashed or killed chat left in flight go into history first, so that
    // `--resume` finds them.
    let mut notices = crate::history::recover_in_flight(&crate::paths::data_dir());
    let mut resumed_on = None;
    let (conversation, save_slot) = match &args.resume {
        None => (
            crate::app::conversation::Conversation::new(
                crate::ids::new_id(std::time::SystemTime::now()),
                crate::tui::now().unix_s,
                settings.system_prompt.clone(),
            ),
            crate::history::SaveSlot::new(&history_dir),
        ),
        Some(id) => {
            let path = if id.is_empty() {
                crate::history::latest(&history_dir)
                    .map_err(|e| Failure::new(crate::commands::FAILURE, e.to_string()))?
                    .ok_or_else(|| Failure::usage("there is no saved conversation to resume"))?
            } else {
                crate::history::find(&history_dir, id).map_err(|e| Failure::usage(e.to_string()))?
            };
            let resumed = crate::history::resume(&path, std::time::SystemTime::now())
                .map_err(|e| Failure::new(crate::commands::FAILURE, e.to_string()))?;
            notices.push(resumed.resumed_notice());
            notices.extend(resumed.format_notice());
            notices.extend(resumed.notice());
            resumed_on = Some(crate::history::resume_model(&resumed.conversation));
            (
                crate::app::conversation::Conversation::from_saved(&resumed.conversation),
                crate::history::SaveSlot::resumed(&history_dir, &resumed),
            )
        }
    };
    Ok((conversation, save_slot, notices, resumed_on))
}
