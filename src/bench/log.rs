//! The results log: every bench run appended as one JSON line to `<data dir>/results.jsonl`
//! (id, time, command line, rows), so that "measure, change one thing, measure again" has a
//! memory. `--vs` compares a run with an earlier one row by row and names the settings that
//! differ; `tokscope results` lists the runs.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::report::Row;
use crate::metrics::fmt_opt;

/// The log's file name inside the data dir.
pub(crate) const RESULTS_FILE: &str = "results.jsonl";

/// The settings `--vs` compares (with the model file's fingerprint).
const COMPARED_SETTINGS: &[(&str, &str)] = &[
    ("n_gpu_layers", "ngl"),
    ("threads", "threads"),
    ("n_batch", "n_batch"),
    ("n_ubatch", "n_ubatch"),
    ("type_k", "ctk"),
    ("type_v", "ctv"),
    ("flash_attn", "fa"),
];

pub(crate) fn results_path(data_dir: &Path) -> PathBuf {
    data_dir.join(RESULTS_FILE)
}

/// One run as it is written to the log: bench's rows, or the speculative sweep's
/// (`spec::SpecRow`, which carry the same `kind`, `test`, `tok_per_s_mean` and `stamp`).
#[derive(Debug, Serialize)]
pub(crate) struct RunRecord<'a, R: Serialize = Row> {
    pub id: &'a str,
    pub unix_time_s: u64,
    pub command_line: &'a str,
    pub rows: &'a [R],
}

/// Append one run as one line, whole or not at all (`fsx::append_line`: locked, a torn last
/// line moved aside first, a failed write cut back off, the file user-only).
pub(crate) fn append<R: Serialize>(
    path: &Path,
    record: &RunRecord<R>,
) -> Result<Option<crate::fsx::TornLine>, crate::fsx::WriteError> {
    let line = serde_json::to_vec(record).map_err(|e| crate::fsx::WriteError::Write {
        path: path.to_path_buf(),
        problem: crate::fsx::WriteProblem::Other,
        source: std::io::Error::other(e),
    })?;
    crate::fsx::append_line(path, &line)
}

/// A run read back from the log: only what listings and comparisons need, so that older and
/// newer row layouts both read.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct StoredRun {
    pub id: String,
    #[serde(default)]
    pub unix_time_s: u64,
    #[serde(default)]
    pub command_line: String,
    #[serde(default)]
    pub rows: Vec<StoredRow>,
    /// The whole line, for `tokscope results ID`.
    #[serde(skip)]
    pub raw: Value,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct StoredRow {
    #[serde(default)]
    pub kind: String,
    pub test: String,
    #[serde(default)]
    pub params: Value,
    pub tok_per_s_mean: f64,
    #[serde(default)]
    pub ttft_p50_ms: Option<f64>,
    #[serde(default)]
    pub itl_p50_ms: Option<f64>,
    #[serde(default)]
    pub stamp: StoredStamp,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct StoredStamp {
    #[serde(default)]
    pub model_file: String,
    #[serde(default)]
    pub model_fingerprint: String,
}

/// Every readable run, oldest first, and how many lines could not be read. A missing log is
/// an empty one.
pub(crate) fn read_runs(path: &Path) -> std::io::Result<(Vec<StoredRun>, usize)> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    let mut runs = Vec::new();
    let mut unreadable = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let parsed = serde_json::from_str::<Value>(line).ok().and_then(|raw| {
            let mut run: StoredRun = serde_json::from_value(raw.clone()).ok()?;
            run.raw = raw;
            Some(run)
        });
        match parsed {
            Some(run) => runs.push(run),
            None => unreadable += 1,
        }
    }
    Ok((runs, unreadable))
}

/// `last`, an exact id, or a prefix matching exactly one run.
pub(crate) fn find_run<'a>(runs: &'a [StoredRun], query: &str) -> Result<&'a StoredRun, String> {
    if query == "last" {
        return runs
            .last()
            .ok_or_else(|| "the results log has no runs yet; run `tokscope bench` first".into());
    }
    if let Some(run) = runs.iter().find(|r| r.id == query) {
        return Ok(run);
    }
    let matches: Vec<&StoredRun> = runs.iter().filter(|r| r.id.starts_with(query)).collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "no run in the results log matches `{query}` (see `tokscope results`)"
        )),
        many => Err(format!(
            "`{query}` matches {} runs ({}); type more of the id",
            many.len(),
            many.iter()
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// `YYYY-MM-DD HH:MM:SS UTC` from an id made by `ids::new_id` (its first 15 characters
/// are the UTC time it was made).
pub(crate) fn id_time(id: &str) -> Option<String> {
    let (date, time) = (id.get(0..8)?, id.get(9..15)?);
    if id.get(8..9)? != "-" || !date.bytes().chain(time.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(format!(
        "{}-{}-{} {}:{}:{} UTC",
        &date[0..4],
        &date[4..6],
        &date[6..8],
        &time[0..2],
        &time[2..4],
        &time[4..6]
    ))
}

fn value_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.as_i64() == Some(-1) => "all".into(),
        Some(other) => other.to_string(),
        None => "—".into(),
    }
}

/// The settings that differ between two rows, as `name before → now`.
fn differences(before: &StoredRow, now: &StoredRow) -> Vec<String> {
    let mut out = Vec::new();
    if before.stamp.model_fingerprint != now.stamp.model_fingerprint {
        out.push(format!(
            "model {} ({}) → {} ({})",
            before.stamp.model_file,
            before.stamp.model_fingerprint,
            now.stamp.model_file,
            now.stamp.model_fingerprint
        ));
    }
    for (key, label) in COMPARED_SETTINGS {
        let (a, b) = (before.params.get(key), now.params.get(key));
        if a != b {
            out.push(format!("{label} {} → {}", value_text(a), value_text(b)));
        }
    }
    out
}

fn change_pct(before: Option<f64>, now: Option<f64>) -> Option<f64> {
    match (before, now) {
        (Some(b), Some(n)) if b > 0.0 && n.is_finite() => Some((n - b) / b * 100.0),
        _ => None,
    }
}

fn signed_pct(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{v:+.1}%"))
}

/// Rows of `now` paired with the row of `before` they compare with: same kind and test name,
/// the k-th such row with the k-th (so a changed setting still finds its partner).
fn pair_rows<'a>(
    before: &'a [StoredRow],
    now: &'a [StoredRow],
) -> Vec<(&'a StoredRow, Option<&'a StoredRow>)> {
    let nth = |rows: &'a [StoredRow], row: &StoredRow, k: usize| {
        rows.iter()
            .filter(|r| r.kind == row.kind && r.test == row.test)
            .nth(k)
    };
    now.iter()
        .enumerate()
        .map(|(i, row)| {
            let k = now[..i]
                .iter()
                .filter(|r| r.kind == row.kind && r.test == row.test)
                .count();
            (row, nth(before, row, k))
        })
        .collect()
}

/// Rows in the stored layout, for comparing with the log.
pub(crate) fn as_stored(rows: &[Row]) -> Vec<StoredRow> {
    rows.iter()
        .filter_map(|r| serde_json::to_value(r).ok())
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

/// Each figure's change against `base`, and the settings that differ.
pub(crate) fn comparison(now: &[StoredRow], base: &StoredRun) -> String {
    let when = id_time(&base.id).unwrap_or_else(|| format!("{} s since 1970", base.unix_time_s));
    let mut out = format!("\nvs run {} ({when}): {}\n", base.id, base.command_line);
    let pairs = pair_rows(&base.rows, now);
    let mut all_diffs: Vec<String> = Vec::new();
    let mut lines = String::from(
        "| test | t/s before | t/s now | t/s | TTFT p50 | ITL p50 | settings that differ |\n|---|---:|---:|---:|---:|---:|---|\n",
    );
    for (row, before) in &pairs {
        let Some(before) = before else {
            lines.push_str(&format!(
                "| {} | — | {:.2} | new | — | — | |\n",
                row.test, row.tok_per_s_mean
            ));
            continue;
        };
        let diffs = differences(before, row);
        for d in &diffs {
            if !all_diffs.contains(d) {
                all_diffs.push(d.clone());
            }
        }
        lines.push_str(&format!(
            "| {} | {:.2} | {:.2} | {} | {} | {} | {} |\n",
            row.test,
            before.tok_per_s_mean,
            row.tok_per_s_mean,
            signed_pct(change_pct(
                Some(before.tok_per_s_mean),
                Some(row.tok_per_s_mean)
            )),
            signed_pct(change_pct(before.ttft_p50_ms, row.ttft_p50_ms)),
            signed_pct(change_pct(before.itl_p50_ms, row.itl_p50_ms)),
            diffs.join(", ")
        ));
    }
    if all_diffs.is_empty() {
        out.push_str("settings that differ: none\n");
    } else {
        out.push_str(&format!("settings that differ: {}\n", all_diffs.join("; ")));
    }
    out.push_str(&lines);
    out
}

/// The table `tokscope results` prints, newest run last.
pub(crate) fn listing(runs: &[StoredRun]) -> String {
    let header = ["id", "time", "models", "tests", "headline t/s"];
    let mut rows: Vec<[String; 5]> = Vec::new();
    for run in runs {
        let mut models: Vec<&str> = Vec::new();
        let mut tests: Vec<&str> = Vec::new();
        for r in &run.rows {
            if !models.contains(&r.stamp.model_file.as_str()) {
                models.push(&r.stamp.model_file);
            }
            if !tests.contains(&r.test.as_str()) {
                tests.push(&r.test);
            }
        }
        rows.push([
            run.id.clone(),
            id_time(&run.id).unwrap_or_default(),
            models.join(", "),
            tests.join(" "),
            headline(&run.rows),
        ]);
    }
    // A Markdown table whose columns also line up in a terminal.
    let cell_width = |s: &str| unicode_width::UnicodeWidthStr::width(s);
    let mut widths = header.map(cell_width);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell_width(cell));
        }
    }
    let line = |cells: &[String]| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w.saturating_sub(cell_width(c)))))
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(&header.map(String::from));
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&format!("|-{}-|\n", rule.join("-|-")));
    for row in &rows {
        out.push_str(&line(row));
    }
    out
}

/// The first pp and the first tg row's t/s (any first row when there are neither).
fn headline(rows: &[StoredRow]) -> String {
    let pick = |kind: &str| rows.iter().find(|r| r.kind == kind);
    let chosen: Vec<&StoredRow> = match (pick("pp"), pick("tg")) {
        (None, None) => rows.first().into_iter().collect(),
        (a, b) => a.into_iter().chain(b).collect(),
    };
    chosen
        .iter()
        .map(|r| format!("{} {}", r.test, fmt_opt(Some(r.tok_per_s_mean), 2)))
        .collect::<Vec<_>>()
        .join(" · ")
}

#[cfg(test)]
mod tests {
    use super::super::format::tests::sample_row;
    use super::*;
    use crate::llama::measure::TestKind;
    use std::io::Write;

    #[test]
    fn appends_lines_and_reads_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = results_path(&dir.path().join("data"));
        let rows = vec![sample_row(TestKind::Tg, "tg8", 1)];
        for id in ["20250101-000000-aaaa", "20250102-000000-bbbb"] {
            let record = RunRecord {
                id,
                unix_time_s: 1,
                command_line: "tokscope bench -t 1",
                rows: &rows,
            };
            append(&path, &record).unwrap();
        }
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"not json\n")
            .unwrap();
        let (runs, unreadable) = read_runs(&path).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(unreadable, 1);
        assert_eq!(runs[1].rows[0].test, "tg8");
        assert_eq!(find_run(&runs, "last").unwrap().id, "20250102-000000-bbbb");
        assert_eq!(
            find_run(&runs, "20250101").unwrap().id,
            "20250101-000000-aaaa"
        );
        assert!(find_run(&runs, "2025")
            .unwrap_err()
            .contains("matches 2 runs"));
        assert!(find_run(&runs, "1999").unwrap_err().contains("no run"));
        assert!(find_run(&[], "last").unwrap_err().contains("no runs yet"));
        let list = listing(&runs);
        assert!(
            list.contains("2025-01-02 00:00:00 UTC") && list.contains("tg8 105.00"),
            "{list}"
        );
        // Aligned: every line as wide as the header, the column bars in the same places.
        let lines: Vec<&str> = list.lines().collect();
        assert_eq!(lines.len(), 4, "{list}");
        let bars = |l: &str| -> Vec<usize> { l.match_indices('|').map(|(i, _)| i).collect() };
        for l in &lines[1..] {
            assert_eq!(bars(l), bars(lines[0]), "{list}");
        }
    }

    #[test]
    fn comparison_names_the_changed_setting_and_the_change() {
        let before_rows = vec![sample_row(TestKind::Tg, "tg8", 1)];
        let base = StoredRun {
            id: "20250101-000000-aaaa".into(),
            unix_time_s: 0,
            command_line: "tokscope bench -t 1".into(),
            rows: as_stored(&before_rows),
            raw: Value::Null,
        };
        let mut now = sample_row(TestKind::Tg, "tg8", 1);
        now.params.threads = 2;
        now.tok_per_s_mean = 126.0;
        let text = comparison(&as_stored(&[now]), &base);
        assert!(text.contains("threads 1 → 2"), "{text}");
        assert!(text.contains("+20.0%"), "{text}");
        let unchanged = comparison(&as_stored(&before_rows), &base);
        assert!(
            unchanged.contains("settings that differ: none"),
            "{unchanged}"
        );
    }

    #[test]
    fn id_times() {
        assert_eq!(
            id_time("20250309-141516-abcd").as_deref(),
            Some("2025-03-09 14:15:16 UTC")
        );
        assert_eq!(id_time("garbage"), None);
    }
}
