//! The engine on real llama.cpp: sessions, speculation, sampling, synthetic presets, the real demo model, model switches.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "common/mod.rs"]
mod common;

#[path = "engine.rs"]
mod engine;
#[path = "spec.rs"]
mod spec;
#[path = "sampling.rs"]
mod sampling;
#[path = "backend_sampling.rs"]
mod backend_sampling;
#[path = "synth_presets.rs"]
mod synth_presets;
#[path = "real_model.rs"]
mod real_model;
#[path = "spec_real_model.rs"]
mod spec_real_model;
#[path = "model_switch.rs"]
mod model_switch;
