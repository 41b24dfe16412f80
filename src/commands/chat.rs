//! `tokscope chat` (also the bare `tokscope`): the TUI on the configured (or demo) model.

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
    /// Continue a saved conversation: its id (or a unique prefix), or the latest without one.
    #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "")]
    pub resume: Option<String>,
    /// Generate exactly --max-tokens per answer, ignoring end-of-generation tokens and stop
    /// strings (for measuring decode speed in the chat).
    #[arg(long)]
    pub ignore_eos: bool,
}

/// `tokscope chat`: the TUI on the configured (or demo) model.
pub(crate) fn run(args: &ChatArgs, mut settings: Settings) -> Result<(), Failure> {
    args.model.apply(&mut settings)?;
    args.sampling.apply(&mut settings)?;
    args.spec.apply(&mut settings)?;
    let config = engine_config(&settings)?;
    if !std::io::stdout().is_terminal() {
        return Err(Failure::new(
            crate::commands::USAGE,
            "the chat needs a terminal; use `tokscope run -p TEXT` for headless use",
        ));
    }
    let history_dir = crate::history::history_dir(&crate::paths::data_dir());
    // Temp files of saves killed with `kill -9` (older than a minute) are removed.
    crate::history::remove_stale_temps(&history_dir);
    let mut notices = Vec::new();
    notices.extend(
        super::run::spec_warnings(&settings, &config.model_path)
            .into_iter()
            .map(|w| format!("warning: {w}")),
    );
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
                    .ok_or_else(|| {
                        Failure::new(
                            crate::commands::USAGE,
                            "there is no saved conversation to resume",
                        )
                    })?
            } else {
                crate::history::find(&history_dir, id)
                    .map_err(|e| Failure::new(crate::commands::USAGE, e.to_string()))?
            };
            let resumed = crate::history::resume(&path, std::time::SystemTime::now())
                .map_err(|e| Failure::new(crate::commands::FAILURE, e.to_string()))?;
            notices.extend(resumed.notice());
            (
                crate::app::conversation::Conversation::from_saved(&resumed.conversation),
                crate::history::SaveSlot::resumed(&history_dir, &resumed),
            )
        }
    };
    let mut app = crate::app::App::new(
        config.model_path.clone(),
        conversation,
        settings.sampling.clone(),
        settings.max_tokens,
    );
    app.ignore_eos = args.ignore_eos;
    app.price_per_hour_usd = settings.price_per_gpu_hour_usd;
    // Before the engine starts loading, so the copy probe does not compete with it.
    let gpus = crate::llama::gpu_device_descriptions();
    app.bandwidth = crate::hw::peak_bandwidth(
        settings.bandwidth_gb_s,
        &gpus,
        !gpus.is_empty(),
        settings.engine.threads as usize,
    );
    let (mut engine, events) = crate::engine::EngineHandle::spawn(config.clone())?;
    let result = crate::tui::run_chat(app, &mut engine, events, config, save_slot, notices);
    engine.shutdown();
    match result? {
        (_, crate::tui::ChatEnd::Quit) => Ok(()),
        (_, crate::tui::ChatEnd::Signal(sig)) => Err(Failure::new(
            128 + sig,
            format!("stopped by signal {sig}; every finished turn is saved (`tokscope history`)"),
        )),
    }
}
