//! The engine on real llama.cpp: sessions, speculation, sampling, synthetic presets, the real demo model, model switches.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "common/mod.rs"]
mod common;

#[path = "backend_sampling.rs"]
mod backend_sampling;
#[path = "engine.rs"]
mod engine;
#[path = "model_switch.rs"]
mod model_switch;
#[path = "quality_ref_cache.rs"]
mod quality_ref_cache;
#[path = "real_instruct.rs"]
mod real_instruct;
#[path = "real_model.rs"]
mod real_model;
#[path = "sampling.rs"]
mod sampling;
#[path = "spec.rs"]
mod spec;
#[path = "spec_real_model.rs"]
mod spec_real_model;
#[path = "synth_presets.rs"]
mod synth_presets;
