//! The binary's commands end to end: run, bench, compare, doctor, history and results, hostile files, data safety.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "common/mod.rs"]
mod common;

#[path = "cli.rs"]
mod cli;
#[path = "cli_daily.rs"]
mod cli_daily;
#[path = "data_safety.rs"]
mod data_safety;
#[path = "doctor.rs"]
mod doctor;
#[path = "bench.rs"]
mod bench;
#[path = "compare.rs"]
mod compare;
#[path = "run_vs_tg.rs"]
mod run_vs_tg;
#[path = "spec_cli.rs"]
mod spec_cli;
#[path = "spec_bench.rs"]
mod spec_bench;
#[path = "hostile.rs"]
mod hostile;
#[path = "security.rs"]
mod security;
#[path = "cuda_lookup.rs"]
mod cuda_lookup;
