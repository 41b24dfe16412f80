//! Turning the layered settings into an engine configuration: which model file to load
//! (flag, environment, config file, then the demo model) and the message when there is none.

use std::path::PathBuf;

use crate::commands::{Failure, MODEL};
use crate::config::Settings;
use crate::engine::{ChatMessage, EngineConfig, Role};

/// The model to load: the one the settings name, else the demo model when it is present.
pub fn resolve_model(settings: &Settings) -> Result<PathBuf, Failure> {
    if let Some(m) = &settings.model {
        return Ok(m.clone());
    }
    let data_dir = crate::paths::data_dir();
    crate::demo::find_demo_model(&data_dir).ok_or_else(|| {
        Failure::new(
            MODEL,
            format!(
                "no model given and the demo model is not installed.\n{}",
                crate::demo::how_to_get_demo_message(&data_dir)
            ),
        )
    })
}

pub fn engine_config(settings: &Settings) -> Result<EngineConfig, Failure> {
    Ok(EngineConfig {
        model_path: resolve_model(settings)?,
        settings: settings.engine.clone(),
    })
}

/// The conversation for a single prompt: the configured system prompt, then the user.
pub fn single_turn(settings: &Settings, prompt: &str) -> Vec<ChatMessage> {
    let mut messages = Vec::new();
    if let Some(system) = &settings.system_prompt {
        messages.push(ChatMessage::new(Role::System, system.clone()));
    }
    messages.push(ChatMessage::new(Role::User, prompt));
    messages
}

/// `tokscope chat`: the TUI on the configured (or demo) model.
pub fn chat(args: &crate::cli::ChatArgs, mut settings: Settings) -> Result<(), Failure> {
    use std::io::IsTerminal;
    args.model.apply(&mut settings)?;
    args.sampling.apply(&mut settings)?;
    let config = engine_config(&settings)?;
    if !std::io::stdout().is_terminal() {
        return Err(Failure::new(
            crate::commands::USAGE,
            "the chat needs a terminal; use `tokscope run -p TEXT` for headless use",
        ));
    }
    let history_dir = crate::history::history_dir(&crate::paths::data_dir());
    let conversation = match &args.resume {
        None => crate::app::conversation::Conversation::new(
            crate::history::new_id(std::time::SystemTime::now()),
            crate::tui::now().unix_s,
            settings.system_prompt.clone(),
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
            let saved = crate::history::load(&path)
                .map_err(|e| Failure::new(crate::commands::FAILURE, e.to_string()))?;
            crate::app::conversation::Conversation::from_saved(&saved)
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
    app.bandwidth = crate::hw::peak_bandwidth(settings.bandwidth_gb_s, &gpus, !gpus.is_empty());
    let (mut engine, events) = crate::engine::EngineHandle::spawn(config.clone())?;
    let result = crate::tui::run_chat(app, &mut engine, events, config);
    engine.shutdown();
    match result? {
        (_, crate::tui::ChatEnd::Quit) => Ok(()),
        (_, crate::tui::ChatEnd::Signal(sig)) => Err(Failure::new(
            128 + sig,
            format!("stopped by signal {sig}; every finished turn is saved (`tokscope history`)"),
        )),
    }
}

/// `tokscope history`: the saved conversations.
pub fn history() -> Result<(), Failure> {
    let dir = crate::history::history_dir(&crate::paths::data_dir());
    let outcome = crate::history::list(&dir)
        .map_err(|e| Failure::new(crate::commands::FAILURE, e.to_string()))?;
    for (from, to) in &outcome.set_aside {
        eprintln!(
            "warning: {} is damaged and was moved aside to {} (it was not overwritten)",
            from.display(),
            to.display()
        );
    }
    for (path, why) in &outcome.skipped {
        eprintln!("warning: skipped {}: {why}", path.display());
    }
    print!(
        "{}",
        crate::history::format_list(&outcome.entries, crate::tui::now().unix_s)
    );
    Ok(())
}
