//! `tokscope bench` and `tokscope results`: llama-bench's tests (pp, tg, pg at a depth, over
//! a cartesian sweep of threads, GPU layers, batch sizes, KV-cache types and flash attention)
//! and llama-batched-bench's batching test, run in-process on the same llama.cpp helpers as
//! the chat, with TTFT/ITL percentiles, the bandwidth roofline and cost on every row, output
//! as Markdown, CSV, JSON or JSON lines, and a results log to compare runs against.
//!
//! - `args`: the command line and its validation into a plan.
//! - `sweep`: the parameter sets and tests, in llama-bench's order.
//! - `measure`: the timed runs on a llama.cpp context.
//! - `report`: rows (statistics, roofline, cost, stamp).
//! - `format`: the output formats.
//! - `log`: the results log, `--vs` and `tokscope results`.
//! - `run`: driving the sweep, progress on stderr.

mod args;
pub(crate) mod format;
mod log;
mod report;
pub(crate) mod run;
mod screen;
pub(crate) mod sweep;

use std::io::Write;

pub use args::{rewrite_llama_bench_flags, BenchArgs, BenchPlan, OutputFormat, ResultsArgs};
pub use format::render;
pub use log::{results_path, StoredRun, RESULTS_FILE};
pub use report::{BenchParams, Row};
pub use screen::measure_batch;
pub use sweep::{TestKind, TestSpec};

use crate::commands::{Failure, FAILURE, MODEL, USAGE};
use crate::config::Settings;

/// `tokscope bench`.
pub fn bench(args: &BenchArgs, settings: Settings) -> Result<(), Failure> {
    let plan = BenchPlan::from_args(args, &settings)?;
    run::check_models(&plan.models)?;
    let log_path = log::results_path(&crate::paths::data_dir());
    let baseline = match &plan.vs {
        Some(query) => Some(baseline(&log_path, query)?),
        None => None,
    };
    let now = std::time::SystemTime::now();
    let run_id = crate::history::new_id(now);
    let jobs = sweep::expand(&plan.models, &plan.sweep);
    let outcome = run::run_jobs(&plan, &jobs, &settings.sampling, &run_id);
    let mut rows = outcome.rows;
    report::relate_batches(&mut rows);
    let text = format::render(&rows, plan.output)
        .map_err(|e| Failure::new(FAILURE, format!("cannot format the results: {e}")))?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    if !rows.is_empty() {
        save(&log_path, &run_id, crate::history::unix_s(now), &rows);
    }
    if let Some(path) = &plan.plot {
        plot_rows(&rows, path)?;
    }
    if let Some(base) = baseline {
        let text = log::comparison(&log::as_stored(&rows), &base);
        if plan.output == OutputFormat::Markdown {
            stdout.write_all(text.as_bytes())?;
        } else {
            // Keep stdout machine-readable.
            eprint!("{text}");
        }
    }
    stdout.flush()?;
    match outcome.failures.as_slice() {
        [] => Ok(()),
        failures => Err(Failure::new(
            if outcome.model_failed { MODEL } else { FAILURE },
            format!(
                "{} of {} tests failed:\n  {}",
                failures.len(),
                jobs.len(),
                failures.join("\n  ")
            ),
        )),
    }
}

/// `--plot FILE.ext`: FILE-roofline.ext from the rows with a ceiling, FILE-batch.ext from the
/// batch rows.
fn plot_rows(rows: &[Row], path: &std::path::Path) -> Result<(), Failure> {
    use crate::plot::{plot_batch_sweep, plot_roofline, BatchPoint, RooflinePoint};
    let with_suffix = |suffix: &str| {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_default();
        path.with_file_name(format!("{stem}-{suffix}.{ext}"))
    };
    let plot_failed = |e: crate::plot::PlotError| Failure::new(FAILURE, format!("--plot: {e}"));
    let roofline: Vec<RooflinePoint> = rows
        .iter()
        .filter_map(|r| {
            Some(RooflinePoint {
                label: format!(
                    "{} {}",
                    sweep::file_name(std::path::Path::new(&r.params.model)),
                    r.test
                ),
                bytes_per_token: r.bytes_per_token?,
                tok_per_s: r.decode_tok_per_s?,
            })
        })
        .collect();
    let bandwidth = rows.iter().find_map(|r| {
        Some((
            r.bandwidth_gb_s? * 1e9,
            r.bandwidth_source.clone().unwrap_or_default(),
        ))
    });
    if let (false, Some((bw, label))) = (roofline.is_empty(), bandwidth) {
        let out = with_suffix("roofline");
        plot_roofline(
            &roofline,
            bw,
            &label,
            "decode speed against bytes read per token",
            &out,
        )
        .map_err(plot_failed)?;
        eprintln!("wrote {}", out.display());
    } else {
        eprintln!("--plot: no roofline (no decode rows with a known bandwidth)");
    }
    let batch: Vec<BatchPoint> = rows
        .iter()
        .filter(|r| r.kind == TestKind::Batch)
        .filter_map(|r| {
            Some(BatchPoint {
                batch: r.params.batch_size,
                aggregate_tok_per_s: r.tok_per_s_mean,
                per_sequence_tok_per_s: r.per_sequence_tok_per_s?,
                itl_p50_ms: r.itl_p50_ms?,
                itl_p99_ms: r.itl_p99_ms?,
            })
        })
        .collect();
    if !batch.is_empty() {
        let out = with_suffix("batch");
        plot_batch_sweep(&batch, "batching: aggregate and per-sequence speed", &out)
            .map_err(plot_failed)?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}

/// The run `--vs` names, read before measuring so that a wrong id fails at once.
fn baseline(log_path: &std::path::Path, query: &str) -> Result<StoredRun, Failure> {
    let (runs, _) = log::read_runs(log_path).map_err(|e| {
        Failure::new(
            FAILURE,
            format!("cannot read the results log {}: {e}", log_path.display()),
        )
    })?;
    log::find_run(&runs, query)
        .cloned()
        .map_err(|e| Failure::new(USAGE, format!("--vs {query}: {e}")))
}

/// Append the run to the results log; a log that cannot be written costs a warning, not the
/// results already printed.
pub(crate) fn save(log_path: &std::path::Path, run_id: &str, unix_time_s: u64, rows: &[Row]) {
    let command_line = command_line();
    let record = log::RunRecord {
        id: run_id,
        unix_time_s,
        command_line: &command_line,
        rows,
    };
    match log::append(log_path, &record) {
        Ok(()) => eprintln!("saved as run {run_id} in {}", log_path.display()),
        Err(e) => eprintln!(
            "warning: could not append to the results log {}: {e}",
            log_path.display()
        ),
    }
}

/// This process's command line, quoted where a shell would need it.
pub(crate) fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./,=:+@%".contains(c))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `tokscope results [ID]`.
pub fn results(args: &ResultsArgs) -> Result<(), Failure> {
    let path = log::results_path(&crate::paths::data_dir());
    let (runs, unreadable) = log::read_runs(&path).map_err(|e| {
        Failure::new(
            FAILURE,
            format!("cannot read the results log {}: {e}", path.display()),
        )
    })?;
    if unreadable > 0 {
        eprintln!(
            "warning: {unreadable} line(s) of {} could not be read",
            path.display()
        );
    }
    let text = match &args.id {
        Some(id) => {
            let run = log::find_run(&runs, id).map_err(|e| Failure::new(USAGE, e))?;
            serde_json::to_string_pretty(&run.raw)
                .map_err(|e| Failure::new(FAILURE, e.to_string()))?
                + "\n"
        }
        None if runs.is_empty() => {
            eprintln!(
                "no bench runs yet in {} (run `tokscope bench`)",
                path.display()
            );
            return Ok(());
        }
        None => log::listing(&runs),
    };
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}
