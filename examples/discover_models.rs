//! How long the model picker's search takes (not part of CI): runs `tokscope::discover` over
//! the folders given (as `model_dirs`, nothing else searched) R times and prints, per run, the
//! models found, files skipped, folders read and the wall time. Run by
//! `scripts/bench-discover.sh`. Usage: discover_models RUNS DIR...

use std::path::PathBuf;
use std::time::Duration;

use tokscope::discover::{discover, Limits, Roots};

fn main() {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let dirs: Vec<PathBuf> = args.map(PathBuf::from).collect();
    let roots = Roots {
        config_dirs: dirs,
        ..Roots::default()
    };
    // A deadline far out, so the time measured is the whole search.
    let limits = Limits {
        deadline: Duration::from_secs(600),
        max_models: 100_000,
    };
    for run in 1..=runs {
        let found = discover(&roots, limits);
        println!(
            "run {run}: {} models, {} skipped, {} folders, {:.1} ms{}",
            found.models.len(),
            found.skipped,
            found.folders_read,
            found.elapsed.as_secs_f64() * 1e3,
            found
                .cut_short
                .map(|w| format!(" (cut short: {w})"))
                .unwrap_or_default()
        );
    }
}
