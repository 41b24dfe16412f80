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
//! - `spec`: the speculative decoding sweep (`--spec ngram`, `--draft`, `--draft-max 0,2,4,8`).
//! - `chat_sweep`: the chat's batch sweep (F2) as a run of the results log.
//! - `spec_chart`: the sweep's chart for the terminal (speed-up and acceptance against k).

pub(crate) mod chat_sweep;
pub(crate) mod format;
pub(crate) mod gpu;
pub(crate) mod kernel_baseline;
pub(crate) mod log;
pub(crate) mod plan;
pub(crate) mod plots;
pub(crate) mod profile;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod spec;
pub(crate) mod spec_chart;
pub(crate) mod sweep;
pub(crate) mod trace;
pub(crate) mod vs_run;

pub(crate) use log::{results_path, StoredRun};
pub(crate) use plan::BenchPlan;
pub(crate) use report::Row;

/// Append the run to the results log; a log that cannot be written costs a warning, not the
/// results already printed.
pub(crate) fn save<R: serde::Serialize>(
    log_path: &std::path::Path,
    run_id: &str,
    unix_time_s: u64,
    rows: &[R],
) {
    match append_run(log_path, run_id, unix_time_s, &command_line(), rows) {
        Ok(torn) => {
            if let Some(torn) = torn {
                eprintln!("{}", crate::text::terminal_safe(&torn));
            }
            eprintln!("saved as run {run_id} in {}", log_path.display())
        }
        Err(e) => eprintln!("warning: {}", crate::text::terminal_safe(&e)),
    }
}

/// Append the run to the results log without printing (the chat's screen shows the outcome).
/// `Ok(Some(warning))`: a torn last line was moved aside first.
pub(crate) fn append_run<R: serde::Serialize>(
    log_path: &std::path::Path,
    run_id: &str,
    unix_time_s: u64,
    command_line: &str,
    rows: &[R],
) -> Result<Option<String>, String> {
    let record = log::RunRecord {
        id: run_id,
        unix_time_s,
        command_line,
        rows,
    };
    log::append(log_path, &record)
        .map(|torn| torn.map(|t| t.warning(log_path)))
        .map_err(|e| {
            format!(
                "could not append to the results log {}: {e}",
                log_path.display()
            )
        })
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
