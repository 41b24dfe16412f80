//! How long the model picker's search takes (not part of CI): runs `tokscope::discover` over
//! the folders given (as `model_dirs`, nothing else searched) R times and prints, per run, the
//! models found, files skipped, folders read and the wall time; then, on the largest file found,
//! the header read with and without its arrays (the vocabulary), side by side in ABBA order.
//! Run by `scripts/bench-discover.sh`. Usage: discover_models RUNS DIR...

use std::path::PathBuf;
use std::time::{Duration, Instant};

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
    let mut largest = None;
    for run in 1..=runs {
        let found = discover(&roots, limits);
        largest = found
            .models
            .iter()
            .max_by_key(|m| m.size_bytes)
            .map(|m| m.path.clone());
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
    let Some(path) = largest else {
        return;
    };
    let time = |f: &dyn Fn() -> bool| {
        let t = Instant::now();
        assert!(f(), "the header reads");
        t.elapsed().as_secs_f64() * 1e3
    };
    let full = || tokscope::gguf::read_metadata(&path).is_ok();
    let lean = || tokscope::gguf::read_metadata_without_arrays(&path).is_ok();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for round in 0..runs.max(2) * 2 {
        // ABBA: A B, B A, A B, ...
        if round % 2 == 0 {
            a.push(time(&full));
            b.push(time(&lean));
        } else {
            b.push(time(&lean));
            a.push(time(&full));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut ratios: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x / y).collect();
    println!("header of {} ({} rounds, ABBA):", path.display(), a.len());
    println!(
        "  with arrays    (read_metadata):                median {:.2} ms",
        median(&mut a)
    );
    println!(
        "  without arrays (read_metadata_without_arrays): median {:.2} ms",
        median(&mut b)
    );
    let r = median(&mut ratios);
    println!(
        "  ratio with/without: median {r:.2}, range {:.2}..{:.2}",
        ratios[0],
        ratios[ratios.len() - 1]
    );
}
