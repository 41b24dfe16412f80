//! The binary's commands end to end: run, bench, compare, doctor, history and results, hostile files, data safety.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "common/mod.rs"]
mod common;

#[path = "bench.rs"]
mod bench;
#[path = "cli.rs"]
mod cli;
#[path = "cli_daily.rs"]
mod cli_daily;
#[path = "compare.rs"]
mod compare;
#[path = "cuda_lookup.rs"]
mod cuda_lookup;
#[path = "data_safety.rs"]
mod data_safety;
#[path = "doctor.rs"]
mod doctor;
#[path = "hostile.rs"]
mod hostile;
#[path = "pretokenizer_matrix.rs"]
mod pretokenizer_matrix;
#[path = "profile.rs"]
mod profile;
#[path = "quality_ref.rs"]
mod quality_ref;
#[path = "run_vs_tg.rs"]
mod run_vs_tg;
#[path = "security.rs"]
mod security;
#[path = "spec_bench.rs"]
mod spec_bench;
#[path = "spec_cli.rs"]
mod spec_cli;
#[path = "template_matrix.rs"]
mod template_matrix;
