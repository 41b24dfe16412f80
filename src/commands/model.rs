//! Model resolution: turning the layered settings into an engine configuration: which model file to load
//! (flag, environment, config file, then the demo model) and the message when there is none.

use std::path::PathBuf;

use crate::commands::{Failure, MODEL};
use crate::config::Settings;
use crate::engine::{ChatMessage, EngineConfig, Role};
use crate::llama::settings::EngineSettings;

/// The model to load: the one the settings name, else a demo model that is present: the
/// instruct model first (a chat app's user types a question and expects an answer in the
/// model's own chat format, ending where the model ends its turn), then Gemma 3 270M (a base
/// model, answered through the completion transcript).
pub(crate) fn resolve_model(settings: &Settings) -> Result<PathBuf, Failure> {
    if let Some(m) = &settings.model {
        return Ok(m.clone());
    }
    let data_dir = crate::paths::data_dir();
    let instruct = crate::demo::find_instruct_model(&data_dir);
    instruct
        .or_else(|| crate::demo::find_demo_model(&data_dir))
        .ok_or_else(|| {
            Failure::new(
                MODEL,
                format!(
                    "no model given and no demo model is installed.\n{}",
                    crate::demo::how_to_get_demo_message(&data_dir)
                ),
            )
        })
}

/// The roofline's bandwidths for a local model, as the chat and `run` take them: config
/// `bandwidth_gb_s`, else the GPU's and the shared CPU probe (cached per machine and thread
/// count). Called before the engine starts, so a first probe does not compete with the load,
/// and said on stderr when it measures.
pub(crate) fn peak_bandwidths(settings: &Settings) -> crate::metrics::roofline::Peaks {
    crate::hw::peak_bandwidths(
        settings.bandwidth_gb_s,
        crate::llama::device_bw::first_gpu_bandwidth,
        settings.engine.threads as usize,
        || eprintln!("measuring memory bandwidth (once per machine, a few seconds) …"),
    )
}

pub(crate) fn engine_config(settings: &Settings) -> Result<EngineConfig, Failure> {
    Ok(EngineConfig {
        model_path: resolve_model(settings)?,
        settings: EngineSettings {
            first_sampling: Some(settings.sampling.clone()),
            ..settings.engine.clone()
        },
    })
}

/// The conversation for a single prompt: the configured system prompt, then the user.
pub(crate) fn single_turn(settings: &Settings, prompt: &str) -> Vec<ChatMessage> {
    let mut messages = Vec::new();
    if let Some(system) = &settings.system_prompt {
        messages.push(ChatMessage::new(Role::System, system.clone()));
    }
    messages.push(ChatMessage::new(Role::User, prompt));
    messages
}
