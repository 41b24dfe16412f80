//! `bench --plot FILE.ext`: the chart files of a run, named FILE-roofline.ext, FILE-batch.ext
//! and FILE-spec.ext, each with a subtitle that says which models, backend, threads and
//! tests it shows. The drawing is `crate::plot`'s; this file picks the points from the rows.

use std::path::{Path, PathBuf};

use crate::fsx::Output;

use super::report::Row;
use super::spec::SpecRow;
use super::sweep;
use crate::llama::measure::TestKind;
use crate::metrics::BatchPoint;
use crate::plot::{
    plot_batch_sweep, plot_depth_sweep, plot_roofline, plot_spec_sweep, PlotError, RooflinePoint,
};

/// The charts `--plot FILE.ext` may write, as FILE-suffix.ext: the sweep's, and the
/// speculative sweep's. Each is written as every output is (`fsx::Output`: never through a
/// link, an existing file only with --force), and checked so before anything is measured.
pub(crate) const SWEEP_CHARTS: [&str; 3] = ["roofline", "batch", "depth"];
pub(crate) const SPEC_CHARTS: [&str; 1] = ["spec"];

/// FILE-roofline.ext from the rows with a ceiling, FILE-batch.ext from the batch rows,
/// FILE-depth.ext from the first depth sweep (`-d` with two depths or more).
/// Returns the lines to tell the user (what was written, what could not be drawn).
pub(crate) fn write_rows(rows: &[Row], path: &Output) -> Result<Vec<String>, PlotError> {
    let mut notes = Vec::new();
    let roofline: Vec<RooflinePoint> = rows
        .iter()
        .filter_map(|r| {
            Some(RooflinePoint {
                label: format!(
                    "{} {}",
                    sweep::file_name(Path::new(&r.params.model)),
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
        let out = path.derived("roofline");
        plot_roofline(
            &roofline,
            bw,
            &label,
            "decode speed against bytes read per token",
            &chart_context(rows.iter().filter(|r| r.bytes_per_token.is_some())),
            &out,
        )?;
        notes.push(format!("wrote {}", out.path.display()));
    } else {
        notes.push("--plot: no roofline (no decode rows with a known bandwidth)".to_owned());
    }
    let batch: Vec<BatchPoint> = rows
        .iter()
        .filter(|r| r.kind == TestKind::Batch)
        .filter_map(|r| {
            Some(BatchPoint {
                batch: r.params.batch_size,
                aggregate_tok_per_s: Some(r.tok_per_s_mean),
                per_sequence_tok_per_s: Some(r.per_sequence_tok_per_s?),
                itl_p50_ms: Some(r.itl_p50_ms?),
                itl_p99_ms: Some(r.itl_p99_ms?),
            })
        })
        .collect();
    if !batch.is_empty() {
        let out = path.derived("batch");
        plot_batch_sweep(
            &batch,
            "batching: aggregate and per-sequence speed",
            &chart_context(rows.iter().filter(|r| r.kind == TestKind::Batch)),
            &out,
        )?;
        notes.push(format!("wrote {}", out.path.display()));
    }
    let sweeps = super::report::depth_sweeps(rows);
    if let Some(first) = sweeps.first() {
        let points: Vec<_> = first.iter().map(|(_, p)| *p).collect();
        let out = path.derived("depth");
        plot_depth_sweep(
            &points,
            "decode against the depth of the KV cache",
            &chart_context(first.iter().map(|(i, _)| &rows[*i])),
            &out,
        )?;
        notes.push(format!("wrote {}", out.path.display()));
        if sweeps.len() > 1 {
            notes.push(format!(
                "--plot: the depth chart shows the first of {} depth sweeps (the table has all)",
                sweeps.len()
            ));
        }
    }
    Ok(notes)
}

/// FILE-spec.ext: the speculative sweep's speed-up and acceptance against k. Returns the
/// file written.
pub(crate) fn write_spec(rows: &[SpecRow], path: &Output) -> Result<PathBuf, PlotError> {
    let points = super::spec::points(rows);
    let out = path.derived("spec");
    let subtitle = match rows.first() {
        Some(r) => format!(
            "{} · {} · {} tokens greedy · {} round(s) · {} thread(s) · tokscope {}, {}",
            sweep::file_name(Path::new(&r.model)),
            r.guesser(),
            r.n_gen,
            r.rounds,
            r.stamp.threads,
            env!("CARGO_PKG_VERSION"),
            r.stamp.llama_cpp
        ),
        None => String::new(),
    };
    plot_spec_sweep(
        &points,
        "speculative decoding: speed-up and acceptance against k",
        &subtitle,
        &out,
    )?;
    Ok(out.path)
}

/// A chart's subtitle: which models, backend, threads and tests it shows, and the versions.
fn chart_context<'a>(rows: impl Iterator<Item = &'a Row>) -> String {
    let rows: Vec<&Row> = rows.collect();
    // The distinct values in first-seen order, at most `max` named.
    let distinct = |values: Vec<String>, max: usize| {
        let seen = super::log::distinct(values);
        let more = seen.len().saturating_sub(max);
        let mut out = seen.into_iter().take(max).collect::<Vec<_>>().join(", ");
        if more > 0 {
            out.push_str(&format!(" +{more} more"));
        }
        out
    };
    let models = distinct(
        rows.iter()
            .map(|r| sweep::file_name(Path::new(&r.params.model)))
            .collect(),
        3,
    );
    let backends = distinct(rows.iter().map(|r| r.stamp.backend.clone()).collect(), 2);
    let threads = distinct(
        rows.iter().map(|r| r.params.threads.to_string()).collect(),
        3,
    );
    let tests = distinct(rows.iter().map(|r| r.test.trim().to_string()).collect(), 4);
    let llama = rows
        .first()
        .map(|r| r.stamp.llama_cpp.clone())
        .unwrap_or_default();
    format!(
        "{models} · {backends} · {threads} thread(s) · {tests} · tokscope {}, {llama}",
        env!("CARGO_PKG_VERSION")
    )
}
