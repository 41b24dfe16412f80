//! The results log: every bench run appended as one JSON line to `<data dir>/results.jsonl`
//! (id, time, command line, rows), so that "measure, change one thing, measure again" has a
//! memory. `--vs` compares a run with an earlier one row by row (a speculative sweep with an
//! earlier sweep, k by k) and names the settings that differ; `tokscope results` lists the runs.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::report::Row;

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

/// Append one run (or comparison) as one line, whole or not at all (`fsx::append_line`: locked,
/// a torn last line moved aside first, a failed write cut back off, the file user-only).
pub(crate) fn append<T: Serialize>(
    path: &Path,
    record: &T,
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
    /// The spread over the repetitions (their count is `params.repetitions`); absent from
    /// older or other rows.
    #[serde(default)]
    pub tok_per_s_sd: Option<f64>,
    #[serde(default)]
    pub ttft_p50_ms: Option<f64>,
    #[serde(default)]
    pub itl_p50_ms: Option<f64>,
    #[serde(default)]
    pub stamp: StoredStamp,
    /// `bench --profile`'s breakdown of the row's generation steps, when it was profiled.
    #[serde(default)]
    pub profile: Option<StoredProfile>,
    /// The speculative sweep's (`spec::SpecRow`), absent from other rows. Each reads as
    /// `None` when absent or of another type, so that no row layout makes a line unreadable.
    #[serde(flatten)]
    pub spec: StoredSpec,
}

/// What `--vs` compares of a speculative sweep's row.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct StoredSpec {
    #[serde(default, deserialize_with = "lenient")]
    pub draft_max: Option<u32>,
    #[serde(default, deserialize_with = "lenient")]
    pub speedup_mean: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub acceptance_rate: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub mode: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub draft_model: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub ngram_n: Option<u32>,
    #[serde(default, deserialize_with = "lenient")]
    pub batch_invariant: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub n_gen: Option<u32>,
    #[serde(default, deserialize_with = "lenient")]
    pub rounds: Option<u32>,
    #[serde(default, deserialize_with = "lenient")]
    pub prompt: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct StoredStamp {
    #[serde(default)]
    pub model_file: String,
    #[serde(default)]
    pub model_fingerprint: String,
    /// The engine's settings as it reported them (the speculative sweep's rows have no
    /// `params`).
    #[serde(default, deserialize_with = "lenient")]
    pub threads: Option<u32>,
    #[serde(default, deserialize_with = "lenient")]
    pub n_gpu_layers: Option<u32>,
    #[serde(default, deserialize_with = "lenient")]
    pub n_batch: Option<u32>,
    #[serde(default, deserialize_with = "lenient")]
    pub n_ctx: Option<u32>,
}

/// An optional field that reads as `None` when it is null or of another type.
fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    Ok(serde_json::from_value(Value::deserialize(d)?).ok())
}

/// Every readable run, oldest first, and how many lines could not be read. A missing log is
/// an empty one.
pub(crate) fn read_runs(path: &Path) -> std::io::Result<(Vec<StoredRun>, usize)> {
    let text = read_if_present(path)?;
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

/// A log's text; a missing log is an empty one.
pub(crate) fn read_if_present(path: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        read => read,
    }
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

/// Two rows measured the same thing: the same kind and test on the same model file (its
/// fingerprint when both rows carry one, else its name).
fn same_test_and_model(a: &StoredRow, b: &StoredRow) -> bool {
    let same_model = match (
        a.stamp.model_fingerprint.as_str(),
        b.stamp.model_fingerprint.as_str(),
    ) {
        ("", _) | (_, "") => a.stamp.model_file == b.stamp.model_file,
        (fa, fb) => fa == fb,
    };
    a.kind == b.kind && a.test == b.test && same_model
}

/// `--vs last` for bench: the latest earlier run that measured one of `now`'s tests on the same
/// model, passing over runs of other models or tests (the chat's batching sweep, a compare's
/// speed pass of another file), which would leave every row "new" and nothing compared. `Err`
/// says that none exists.
pub(crate) fn last_comparable<'a>(
    runs: &'a [StoredRun],
    now: &[StoredRow],
) -> Result<&'a StoredRun, String> {
    runs.iter()
        .rev()
        .find(|run| {
            run.rows
                .iter()
                .any(|b| now.iter().any(|n| same_test_and_model(b, n)))
        })
        .ok_or_else(|| {
            let tests = distinct(now.iter().map(|r| r.test.as_str()));
            let models = distinct(now.iter().map(|r| r.stamp.model_file.as_str()));
            format!(
                "no earlier run in the results log measured {} on {}: nothing to compare \
                 (this run is saved, so the next `--vs last` has one)",
                join_or(&tests, ", ", "these tests"),
                join_or(&models, ", ", "this model"),
            )
        })
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

/// The part of a stored profile `--vs` compares: the mean breakdown's parts.
#[derive(Debug, Clone, Deserialize, Default)]
pub(crate) struct StoredProfile {
    #[serde(default)]
    pub mean: StoredBreakdown,
}

#[derive(Debug, Clone, Deserialize, Default)]
pub(crate) struct StoredBreakdown {
    #[serde(default)]
    pub parts: Vec<StoredPart>,
    #[serde(default)]
    pub wall_ms: f64,
    #[serde(default)]
    pub depth: usize,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct StoredPart {
    pub part: String,
    pub ms: f64,
    #[serde(default)]
    pub sd_ms: f64,
}

/// Where the time went before and now, part by part (both rows profiled): each part that
/// changed beyond its noise (the sum of its two sds over the steps) with its change, then the
/// others named as unchanged. Parts under 1% of both steps are left out. `None` unless both
/// rows carry a profile.
fn profile_change(test: &str, before: &StoredRow, now: &StoredRow) -> Option<String> {
    let (b, n) = (&before.profile.as_ref()?.mean, &now.profile.as_ref()?.mean);
    let mut changed = Vec::new();
    let mut same = Vec::new();
    for p in &n.parts {
        let Some(q) = b.parts.iter().find(|q| q.part == p.part) else {
            continue;
        };
        if p.ms < 0.01 * n.wall_ms && q.ms < 0.01 * b.wall_ms {
            continue;
        }
        let pct = signed_pct(change_pct(Some(q.ms), Some(p.ms)));
        if (p.ms - q.ms).abs() > crate::metrics::noise_threshold(q.sd_ms, p.sd_ms, 0.0) {
            changed.push(format!(
                "{} {pct} ({} → {} ms)",
                p.part,
                crate::fmt::sig(q.ms, 3),
                crate::fmt::sig(p.ms, 3)
            ));
        } else {
            same.push(p.part.clone());
        }
    }
    let depth = if b.depth == n.depth {
        format!("depth {}", n.depth)
    } else {
        format!("depth {} → {}", b.depth, n.depth)
    };
    Some(format!(
        "where a {test} step's time went ({depth}): {}; within the noise: {}\n",
        join_or(&changed, ", ", "no part changed beyond its noise"),
        join_or(&same, ", ", "—")
    ))
}

/// `items` joined by `sep`, or `empty` when there are none.
fn join_or(items: &[impl AsRef<str>], sep: &str, empty: &str) -> String {
    let items: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    if items.is_empty() {
        empty.to_string()
    } else {
        items.join(sep)
    }
}

/// The items in first-seen order, each once.
pub(crate) fn distinct<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
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
pub(crate) fn as_stored<R: Serialize>(rows: &[R]) -> Vec<StoredRow> {
    rows.iter()
        .filter_map(|r| serde_json::to_value(r).ok())
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

/// The line that opens a comparison: which run, when, its command line.
fn heading(base: &StoredRun) -> String {
    let when = id_time(&base.id).unwrap_or_else(|| format!("{} s since 1970", base.unix_time_s));
    format!("\nvs run {} ({when}): {}\n", base.id, base.command_line)
}

/// `settings that differ: …`, each named once.
fn differences_line(all: &[String]) -> String {
    format!("settings that differ: {}\n", join_or(all, "; ", "none"))
}

/// Whether a t/s change is beyond the noise, in words with the spread and n it rests on:
/// "beyond the noise (sd 0.29/1.15, n = 5/5)", "within the noise (…): rerun with -r 10", or, with
/// one repetition on a side, that nothing can be told. The rule is `compare`'s: a difference is
/// called real beyond the sum of the two sds (`metrics::noise_threshold`).
pub(crate) fn change_verdict(before: &StoredRow, now: &StoredRow) -> String {
    let n = |r: &StoredRow| {
        r.params
            .get("repetitions")
            .and_then(Value::as_u64)
            .map_or(1, |v| u32::try_from(v).unwrap_or(u32::MAX))
    };
    let (nb, nn) = (n(before), n(now));
    let ns = if nb == nn {
        format!("n = {nb}")
    } else {
        format!("n = {nb}/{nn}")
    };
    let (Some(sb), Some(sn)) = (before.tok_per_s_sd, now.tok_per_s_sd) else {
        return format!("no spread recorded ({ns}): cannot tell; rerun both with -r 5");
    };
    if nb < 2 || nn < 2 {
        return format!("{ns}: one repetition, no spread: cannot tell; rerun with -r 5");
    }
    let spread = format!("sd {sb:.2}/{sn:.2}, {ns}");
    let diff = (now.tok_per_s_mean - before.tok_per_s_mean).abs();
    if diff > crate::metrics::noise_threshold(sb, sn, 0.0) {
        format!("beyond the noise ({spread})")
    } else {
        format!(
            "within the noise ({spread}): rerun with -r {}",
            (nb.max(nn) * 2).clamp(5, 20)
        )
    }
}

/// Each figure's change against `base`, with its verdict, and the settings that differ.
pub(crate) fn comparison(now: &[StoredRow], base: &StoredRun) -> String {
    let mut out = heading(base);
    let pairs = pair_rows(&base.rows, now);
    let mut all_diffs: Vec<String> = Vec::new();
    let mut row_diffs: Vec<String> = Vec::new();
    let mut advice: Vec<String> = Vec::new();
    let mut rows: Vec<Vec<String>> = Vec::new();
    for (row, before) in &pairs {
        let now_tps = format!("{:.2}", row.tok_per_s_mean);
        let Some(before) = before else {
            let mut cells = vec!["—".to_string(); 7];
            cells[0] = row.test.clone();
            (cells[2], cells[3]) = (now_tps, "new".into());
            rows.push(cells);
            continue;
        };
        let diffs = differences(before, row);
        all_diffs = distinct(all_diffs.into_iter().chain(diffs.iter().cloned()));
        row_diffs.push(diffs.join(", "));
        // The verdict in the table, what to do about it below (the table stays within 120
        // columns).
        let verdict = change_verdict(before, row);
        let verdict = match verdict
            .split_once(": rerun")
            .or_else(|| verdict.split_once("; rerun"))
        {
            Some((call, rest)) => {
                advice.push(format!("{}: rerun{rest}", row.test));
                call.to_string()
            }
            None => verdict,
        };
        rows.push(vec![
            row.test.clone(),
            format!("{:.2}", before.tok_per_s_mean),
            now_tps,
            signed_pct(change_pct(
                Some(before.tok_per_s_mean),
                Some(row.tok_per_s_mean),
            )),
            verdict,
            signed_pct(change_pct(before.ttft_p50_ms, row.ttft_p50_ms)),
            signed_pct(change_pct(before.itl_p50_ms, row.itl_p50_ms)),
        ]);
    }
    use crate::report::Align::{Left, Right};
    let headers = [
        ("test", Left),
        ("t/s before", Right),
        ("t/s now", Right),
        ("t/s", Right),
        ("verdict", Left),
        ("TTFT p50", Right),
        ("ITL p50", Right),
    ];
    out.push_str(&differences_line(&all_diffs));
    // The settings line above names what differs; when rows differ in it, each row's below
    // the table (a column of its own would take the table past 120 columns).
    out.push_str(&crate::report::table(&headers, &rows));
    if distinct(row_diffs.iter().filter(|d| !d.is_empty())).len() > 1 {
        for ((row, _), diffs) in pairs.iter().filter(|(_, b)| b.is_some()).zip(&row_diffs) {
            if !diffs.is_empty() {
                out.push_str(&format!("{}: {diffs}\n", row.test));
            }
        }
    }
    for line in &advice {
        out.push_str(line);
        out.push('\n');
    }
    for (row, before) in &pairs {
        if let Some(line) = before.and_then(|b| profile_change(&row.test, b, row)) {
            out.push_str(&line);
        }
    }
    out
}

/// Whether `run` is a speculative sweep (`bench --spec/--draft`): rows, all of kind `spec`.
fn is_spec_sweep(run: &StoredRun) -> bool {
    !run.rows.is_empty() && run.rows.iter().all(|r| r.kind == super::spec::KIND)
}

/// The earlier speculative sweep `--vs` names with `--spec/--draft`: `last` is the last sweep
/// in the log (other runs after it are passed over); an id (or a unique prefix) must name a
/// sweep.
pub(crate) fn find_spec_sweep<'a>(
    runs: &'a [StoredRun],
    query: &str,
) -> Result<&'a StoredRun, String> {
    const RUN_ONE: &str = "run `tokscope bench --spec ngram` (or `--draft FILE`) first";
    if query == "last" {
        return runs.iter().rev().find(|r| is_spec_sweep(r)).ok_or_else(|| {
            if runs.is_empty() {
                format!("the results log has no runs yet; {RUN_ONE}")
            } else {
                format!(
                    "the results log has no speculative sweep to compare with (none of its {} runs is one); {RUN_ONE}",
                    runs.len()
                )
            }
        });
    }
    let run = find_run(runs, query)?;
    if is_spec_sweep(run) {
        return Ok(run);
    }
    let what = if run.rows.iter().any(|r| r.kind == "run-vs-tg") {
        "a `bench --run-vs-tg` run"
    } else if run.rows.iter().any(|r| r.kind == super::spec::KIND) {
        "a run mixing other rows with a sweep's"
    } else {
        "a plain `tokscope bench` run"
    };
    let tests = distinct(run.rows.iter().map(|r| r.test.as_str()));
    Err(format!(
        "run {} is not a speculative sweep: it is {what} ({}); with --spec/--draft, --vs compares with an earlier sweep: `--vs last` or a sweep's id from `tokscope results`",
        run.id,
        join_or(&tests, ", ", "no rows")
    ))
}

/// A setting's value, `—` when not recorded.
fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "—".into(), |v| v.to_string())
}

/// The settings that differ between two rows of speculative sweeps: the model file's
/// fingerprint, the guesser (mode, draft model, n-gram length), the turn (tokens, rounds,
/// prompt) and the engine's (threads, GPU layers, batch, context) as its stamp reports them.
fn spec_differences(before: &StoredRow, now: &StoredRow) -> Vec<String> {
    let mut out = differences(before, now);
    let (b, n) = (&before.spec, &now.spec);
    let line = |label: &str, a: Option<String>, z: Option<String>| {
        (a != z).then(|| format!("{label} {} → {}", or_dash(a), or_dash(z)))
    };
    let num = |v: Option<u32>| v.map(|v| v.to_string());
    let on_off = |v: Option<bool>| v.map(|v| if v { "on" } else { "off" }.to_string());
    let draft = (b.draft_model != n.draft_model).then(|| {
        // File names, unless they are the same: then the paths tell them apart.
        let name = |d: &Option<String>| d.as_deref().map(|d| super::sweep::file_name(Path::new(d)));
        let (bn, nn) = if name(&b.draft_model) == name(&n.draft_model) {
            (b.draft_model.clone(), n.draft_model.clone())
        } else {
            (name(&b.draft_model), name(&n.draft_model))
        };
        let none = |d: Option<String>| d.unwrap_or_else(|| "none".into());
        format!("draft {} → {}", none(bn), none(nn))
    });
    let (bs, ns) = (&before.stamp, &now.stamp);
    out.extend(
        [
            line("mode", b.mode.clone(), n.mode.clone()),
            draft,
            line(
                "batch-invariant",
                on_off(b.batch_invariant),
                on_off(n.batch_invariant),
            ),
            line("ngram-n", num(b.ngram_n), num(n.ngram_n)),
            line("n_gen", num(b.n_gen), num(n.n_gen)),
            line("rounds", num(b.rounds), num(n.rounds)),
            line("threads", num(bs.threads), num(ns.threads)),
            line("ngl", num(bs.n_gpu_layers), num(ns.n_gpu_layers)),
            line("n_batch", num(bs.n_batch), num(ns.n_batch)),
            line("n_ctx", num(bs.n_ctx), num(ns.n_ctx)),
            line("prompt", b.prompt.clone(), n.prompt.clone()),
        ]
        .into_iter()
        .flatten(),
    );
    out
}

/// A speculative sweep against an earlier one (`base`), k by k: decode tok/s before and now
/// with the change, the speed-up against k = 0 and the acceptance before → now, and the
/// settings that differ. A k only one of the two measured reads `new` or `not measured now`.
pub(crate) fn spec_comparison(now: &[StoredRow], base: &StoredRun) -> String {
    let mut out = heading(base);
    let k_of = |r: &StoredRow| r.spec.draft_max;
    let ks: std::collections::BTreeSet<u32> =
        now.iter().chain(&base.rows).filter_map(k_of).collect();
    let find = |rows: &'_ [StoredRow], k: u32| rows.iter().find(|r| k_of(r) == Some(k)).cloned();
    let times = crate::fmt::times;
    let pct = |v| crate::fmt::pct(v, 0);
    let tok_per_s = |r: &Option<StoredRow>| {
        r.as_ref()
            .map_or_else(|| "—".to_string(), |r| format!("{:.2}", r.tok_per_s_mean))
    };
    let mut all_diffs: Vec<String> = Vec::new();
    let mut rows: Vec<Vec<String>> = Vec::new();
    for k in ks {
        let (before, row) = (find(&base.rows, k), find(now, k));
        let change = match (&before, &row) {
            (Some(b), Some(n)) => {
                all_diffs = distinct(all_diffs.into_iter().chain(spec_differences(b, n)));
                signed_pct(change_pct(Some(b.tok_per_s_mean), Some(n.tok_per_s_mean)))
            }
            (None, _) => "new".to_string(),
            (_, None) => "not measured now".to_string(),
        };
        let figure = |r: &Option<StoredRow>, f: fn(&StoredSpec) -> Option<f64>| {
            r.as_ref().and_then(|r| f(&r.spec))
        };
        rows.push(vec![
            k.to_string(),
            tok_per_s(&before),
            tok_per_s(&row),
            change,
            format!(
                "{} → {}",
                times(figure(&before, |s| s.speedup_mean)),
                times(figure(&row, |s| s.speedup_mean))
            ),
            format!(
                "{} → {}",
                pct(figure(&before, |s| s.acceptance_rate)),
                pct(figure(&row, |s| s.acceptance_rate))
            ),
        ]);
    }
    use crate::report::Align::{Left, Right};
    let headers = [
        ("k", Right),
        ("t/s before", Right),
        ("t/s now", Right),
        ("t/s", Right),
        ("speed-up before → now", Left),
        ("accept before → now", Left),
    ];
    out.push_str(&differences_line(&all_diffs));
    out.push_str(&crate::report::table(&headers, &rows));
    out
}

/// The table `tokscope results` prints, newest run last.
pub(crate) fn listing(runs: &[StoredRun], wide: bool) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for run in runs {
        let models = distinct(run.rows.iter().map(|r| r.stamp.model_file.as_str()));
        let tests = distinct(run.rows.iter().map(|r| r.test.as_str()));
        // A long sweep names its first few only, so the listing stays readable
        // (`results ID` prints every row).
        let few = |items: &[&str], keep: usize, sep: &str| {
            if items.len() > keep {
                format!(
                    "{}{sep}+{} more",
                    items[..keep].join(sep),
                    items.len() - keep
                )
            } else {
                items.join(sep)
            }
        };
        rows.push(if wide {
            vec![
                run.id.clone(),
                id_time(&run.id).unwrap_or_default(),
                few(&models, 2, ", "),
                few(&tests, 4, " "),
                headline(&run.rows),
            ]
        } else {
            // Within 120 columns: the id says when (its first 15 characters are the UTC
            // time), long names lose their middle.
            vec![
                run.id.clone(),
                crate::text::ellipsis_middle(&few(&models, 1, ", "), LISTING_MODEL_CHARS),
                crate::text::ellipsis_middle(&few(&tests, 3, " "), LISTING_TESTS_CHARS),
                headline(&run.rows),
            ]
        });
    }
    let headers: &[&str] = if wide {
        &["id", "time", "models", "tests", "headline t/s"]
    } else {
        &["id (UTC time)", "models", "tests", "headline t/s"]
    };
    let headers: Vec<(&str, crate::report::Align)> = headers
        .iter()
        .map(|h| (*h, crate::report::Align::Left))
        .collect();
    let mut out = crate::report::table(&headers, &rows);
    if !wide {
        out.push_str("(-o md+: the time, two models and four tests, names whole)\n");
    }
    out
}

/// The widest the listing's models and tests cells are by default.
const LISTING_MODEL_CHARS: usize = 26;
const LISTING_TESTS_CHARS: usize = 28;
/// The widest a run table's model cell is by default.
const RUN_TABLE_MODEL_CHARS: usize = 36;

/// One run as a table, llama-bench's shape (`tokscope results ID`): what ran, on what, and
/// t/s with its spread over the repetitions; `-o json` gives the stored line instead.
pub(crate) fn run_table(run: &StoredRun, wide: bool) -> String {
    use crate::report::Align::{Left, Right};
    let raw_rows = run.raw.get("rows").and_then(Value::as_array);
    let raw = |i: usize, path: &[&str]| -> Option<Value> {
        let mut v = raw_rows?.get(i)?;
        for key in path {
            v = v.get(key)?;
        }
        Some(v.clone())
    };
    let text = |v: Option<Value>| match v {
        Some(Value::String(s)) => s,
        Some(Value::Null) | None => "—".to_string(),
        Some(other) => other.to_string(),
    };
    let rows: Vec<Vec<String>> = run
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                if r.stamp.model_file.is_empty() {
                    "—".to_string()
                } else if wide {
                    r.stamp.model_file.clone()
                } else {
                    crate::text::ellipsis_middle(&r.stamp.model_file, RUN_TABLE_MODEL_CHARS)
                },
                text(raw(i, &["stamp", "quantization"])),
                text(raw(i, &["stamp", "backend"])),
                r.stamp.threads.map_or("—".into(), |t| t.to_string()),
                r.stamp.n_gpu_layers.map_or("—".into(), |n| n.to_string()),
                r.test.clone(),
                match r.tok_per_s_sd {
                    Some(sd) => format!("{:.2} ± {sd:.2}", r.tok_per_s_mean),
                    None => format!("{:.2}", r.tok_per_s_mean),
                },
            ]
        })
        .collect();
    let mut out = format!(
        "run {} · {} · {}\n\n",
        run.id,
        id_time(&run.id).unwrap_or_default(),
        run.command_line
    );
    out.push_str(&crate::report::table(
        &[
            ("model", Left),
            ("quant", Left),
            ("backend", Left),
            ("threads", Right),
            ("ngl", Right),
            ("test", Left),
            ("t/s", Right),
        ],
        &rows,
    ));
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
        .map(|r| format!("{} {}", r.test, crate::fmt::opt(Some(r.tok_per_s_mean), 2)))
        .collect::<Vec<_>>()
        .join(" · ")
}

#[cfg(test)]
mod tests {
    use super::super::format::tests::sample_row;
    use super::super::spec::SpecRow;
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
        let list = listing(&runs, true);
        assert!(
            list.contains("2025-01-02 00:00:00 UTC") && list.contains("tg8 105.00"),
            "{list}"
        );
        // A long sweep is named by its first tests only.
        let mut long = runs[1].clone();
        long.rows = (0..9)
            .map(|i| {
                let mut r = long.rows[0].clone();
                r.test = format!("B{i} tg8");
                r
            })
            .collect();
        let list_long = listing(std::slice::from_ref(&long), true);
        assert!(list_long.contains("B3 tg8 +5 more"), "{list_long}");
        assert!(!list_long.contains("B4 tg8"), "{list_long}");
        // Aligned: every line as wide as the header, the column bars in the same places.
        let lines: Vec<&str> = list.lines().collect();
        assert_eq!(lines.len(), 4, "{list}");
        let bars = |l: &str| -> Vec<usize> { l.match_indices('|').map(|(i, _)| i).collect() };
        for l in &lines[1..] {
            assert_eq!(bars(l), bars(lines[0]), "{list}");
        }
    }

    /// Every line of a human table in `text` is within 120 columns.
    fn assert_fits_120(text: &str) {
        for line in text.lines().filter(|l| l.starts_with('|')) {
            let w = unicode_width::UnicodeWidthStr::width(line);
            assert!(w <= 120, "{w} columns: {line}\n{text}");
        }
    }

    #[test]
    fn every_results_table_fits_120_columns_at_its_widest() {
        // The widest realistic content: two long model names, a long sweep of tests, t/s in
        // the ten thousands, one repetition on one side. The listing was 175 columns.
        let names = [
            "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            "SmolLM2-135M-Instruct-Q4_1-Q4_K_M.gguf",
        ];
        let tests = [
            "pp512",
            "tg128",
            "pp512+tg128",
            "B16 pp512+tg128",
            "B32 pp512+tg128",
        ];
        let mut rows = Vec::new();
        for name in names {
            for test in tests {
                let mut r = sample_row(TestKind::Tg, test, 1);
                r.stamp.model_file = name.into();
                r.tok_per_s_mean = 12345.678;
                r.tok_per_s_sd = 1234.5;
                rows.push(r);
            }
        }
        let stored = as_stored(&rows);
        let run = StoredRun {
            id: "20261207-152311-abcd".into(),
            unix_time_s: 0,
            command_line: "tokscope bench -m a.gguf -m b.gguf".into(),
            rows: stored.clone(),
            raw: serde_json::json!({ "rows": rows }),
        };
        let list = listing(std::slice::from_ref(&run), false);
        assert_fits_120(&list);
        assert!(list.contains("-o md+"), "{list}");
        let table = run_table(&run, false);
        assert_fits_120(&table);
        // md+ keeps the names whole.
        assert!(listing(std::slice::from_ref(&run), true).contains("2026-12-07 15:23:11 UTC"));
        assert!(run_table(&run, true).contains(names[0]));
        // `--vs`: every verdict, the longest included, and settings that differ by row.
        let mut before = stored.clone();
        for (i, r) in before.iter_mut().enumerate() {
            if i % 2 == 0 {
                r.params["repetitions"] = serde_json::json!(1);
                r.tok_per_s_sd = None;
            }
            r.params["threads"] = serde_json::json!(i % 3 + 1);
        }
        let base = StoredRun {
            rows: before,
            ..run.clone()
        };
        let text = comparison(&stored, &base);
        assert_fits_120(&text);
        assert!(text.contains("rerun with -r 5"), "{text}");
    }

    #[test]
    fn vs_last_takes_the_last_run_of_the_same_model_and_tests() {
        // The case: the chat's F2 batching sweep came after the bench run, and
        // `--vs last` took it, so every row was "new".
        let bench = sample_row(TestKind::Tg, "tg8", 1);
        let run = |id: &str, rows: Vec<StoredRow>| StoredRun {
            id: id.into(),
            unix_time_s: 0,
            command_line: "tokscope bench".into(),
            rows,
            raw: Value::Null,
        };
        let mut sweep = as_stored(&[sample_row(TestKind::Tg, "tg8", 1)]);
        sweep[0].kind = "batch".into();
        sweep[0].test = "B4 pp64+tg32".into();
        let mut other_model = as_stored(std::slice::from_ref(&bench));
        other_model[0].stamp.model_file = "other.gguf".into();
        other_model[0].stamp.model_fingerprint = "ffff".into();
        let runs = vec![
            run(
                "20250101-000000-aaaa",
                as_stored(std::slice::from_ref(&bench)),
            ),
            run("20250102-000000-bbbb", sweep),
            run("20250103-000000-cccc", other_model),
        ];
        let now = as_stored(&[bench]);
        assert_eq!(
            last_comparable(&runs, &now).unwrap().id,
            "20250101-000000-aaaa"
        );
        // None of the same model and tests: said, not compared.
        let e = last_comparable(&runs[1..], &now).unwrap_err();
        assert!(
            e.contains("no earlier run in the results log measured tg8"),
            "{e}"
        );
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

    /// `--vs last` with nothing changed printed −10.3% and nothing else: each change has its
    /// verdict from the spread and n.
    #[test]
    fn a_change_is_judged_against_the_spread_and_n() {
        let row = |mean: f64, sd: f64, n: u32| {
            let mut r = sample_row(TestKind::Tg, "tg8", 1);
            r.tok_per_s_mean = mean;
            r.tok_per_s_sd = sd;
            r.params.repetitions = n;
            as_stored(&[r]).remove(0)
        };
        let noise = change_verdict(&row(10.0, 0.29, 2), &row(8.97, 1.15, 2));
        assert_eq!(
            noise,
            "within the noise (sd 0.29/1.15, n = 2): rerun with -r 5"
        );
        let real = change_verdict(&row(10.0, 0.1, 5), &row(8.97, 0.2, 5));
        assert_eq!(real, "beyond the noise (sd 0.10/0.20, n = 5)");
        let one = change_verdict(&row(10.0, 0.0, 1), &row(8.0, 0.0, 3));
        assert!(
            one.contains("n = 1/3") && one.contains("cannot tell"),
            "{one}"
        );
        // In the table.
        let base = StoredRun {
            id: "20250101-000000-aaaa".into(),
            unix_time_s: 0,
            command_line: "tokscope bench -t 1".into(),
            rows: vec![row(10.0, 0.29, 2)],
            raw: Value::Null,
        };
        let text = comparison(&[row(8.97, 1.15, 2)], &base);
        let row = text
            .lines()
            .map(crate::report::cells)
            .find(|c| c.first() == Some(&"tg8"))
            .unwrap_or_else(|| panic!("{text}"));
        assert_eq!(
            row[3..5],
            ["-10.3%", "within the noise (sd 0.29/1.15, n = 2)"],
            "{text}"
        );
        assert!(text.contains("\ntg8: rerun with -r 5\n"), "{text}");
    }

    /// `--vs` between two profiled rows: the part that moved beyond its spread is named with
    /// its change, the rest as within the noise.
    #[test]
    fn vs_names_the_part_that_moved_and_calls_the_rest_noise() {
        let stored = |attn: f64, ffn: f64, ffn_sd: f64, depth: usize| {
            let mut v = serde_json::to_value(sample_row(TestKind::Tg, "tg8", 1)).unwrap();
            v["profile"] = serde_json::json!({"mean": {"wall_ms": attn + ffn, "depth": depth, "parts": [
                {"part": "attn over cache", "ms": attn, "sd_ms": 0.02},
                {"part": "ffn down", "ms": ffn, "sd_ms": ffn_sd},
                {"part": "embed", "ms": 0.001, "sd_ms": 0.0},
            ]}});
            serde_json::from_value::<StoredRow>(v).unwrap()
        };
        let before = stored(1.0, 10.0, 0.3, 256);
        let now = stored(1.38, 10.2, 0.3, 4096);
        let base = StoredRun {
            id: "20250101-000000-aaaa".into(),
            unix_time_s: 0,
            command_line: "tokscope bench --profile".into(),
            rows: vec![before],
            raw: Value::Null,
        };
        let text = comparison(&[now], &base);
        assert!(
            text.contains(
                "where a tg8 step's time went (depth 256 → 4096): attn over cache +38.0% (1 → 1.38 ms); within the noise: ffn down"
            ),
            "{text}"
        );
        assert!(
            !text.contains("embed"),
            "parts under 1% are left out: {text}"
        );
        // Rows without a profile: no such line.
        let plain = as_stored(&[sample_row(TestKind::Tg, "tg8", 1)]);
        assert!(!comparison(&plain, &base).contains("time went"));
    }

    /// A row of a speculative sweep as `bench::spec` writes it.
    fn spec_row(k: u32, tok_per_s: f64, speedup: f64, accept: Option<f64>) -> SpecRow {
        SpecRow {
            run_id: "20250101-000000-aaaa".into(),
            kind: "spec",
            test: format!("tg20+ngram-k{k}"),
            model: "/m/tiny.gguf".into(),
            mode: "ngram".into(),
            draft_model: None,
            ngram_n: Some(3),
            batch_invariant: true,
            draft_max: k,
            n_gen: 20,
            rounds: 1,
            prompt: "built-in copy-heavy prompt".into(),
            samples_tok_per_s: vec![tok_per_s],
            tok_per_s_mean: tok_per_s,
            tok_per_s_sd: 0.0,
            speedup_per_round: vec![speedup],
            speedup_mean: speedup,
            speedup_sd: 0.0,
            speedup_min: speedup,
            speedup_max: speedup,
            expected_speedup: Some(1.5),
            row_cost: None,
            expected_speedup_compute: None,
            acceptance_rate: accept,
            acceptance_per_token: accept,
            tokens_per_pass: None,
            mean_draft_len: None,
            draft_ms_per_step: None,
            verify_ms_per_pass: None,
            plain_ms_per_pass: None,
            verify_cost_in_passes: None,
            draft_cost_in_passes: None,
            draft_ms_per_token: None,
            verify_ms_per_token: None,
            plain_ms_per_token: None,
            host_us_per_token: None,
            text_identical: true,
            verdict: None,
            load_before: None,
            load_after: None,
            warning: None,
            default_kernels: None,
            stamp: sample_row(TestKind::Tg, "tg8", 1).stamp,
        }
    }

    fn stored_run(id: &str, command_line: &str, rows: Vec<StoredRow>) -> StoredRun {
        StoredRun {
            id: id.into(),
            unix_time_s: 0,
            command_line: command_line.into(),
            rows,
            raw: Value::Null,
        }
    }

    /// The comparison's table row for k, as its cells.
    fn k_line(text: &str, k: u32) -> Vec<&str> {
        text.lines()
            .map(crate::report::cells)
            .find(|c| c.first() == Some(&k.to_string().as_str()))
            .unwrap_or_else(|| panic!("no row for k={k}: {text}"))
    }

    #[test]
    fn a_sweep_is_compared_k_by_k_with_the_figures_before_and_now() {
        let base = stored_run(
            "20250101-000000-aaaa",
            "tokscope bench --spec ngram --draft-max 0,2,4",
            as_stored(&[
                spec_row(0, 40.0, 1.0, None),
                spec_row(2, 30.0, 0.75, Some(0.4)),
                spec_row(4, 25.0, 0.625, Some(0.35)),
            ]),
        );
        // Now k = 4 is gone and k = 8 is new, and the k come in another order.
        let mut now = vec![
            spec_row(8, 20.0, 0.45, Some(0.3)),
            spec_row(2, 36.0, 0.818, Some(0.5)),
            spec_row(0, 44.0, 1.0, None),
        ];
        let text = spec_comparison(&as_stored(&now), &base);
        assert!(
            text.starts_with("\nvs run 20250101-000000-aaaa (2025-01-01 00:00:00 UTC): tokscope bench --spec ngram"),
            "{text}"
        );
        assert!(text.contains("settings that differ: none\n"), "{text}");
        assert_eq!(
            k_line(&text, 0),
            ["0", "40.00", "44.00", "+10.0%", "1.00× → 1.00×", "— → —"]
        );
        assert_eq!(
            k_line(&text, 2),
            [
                "2",
                "30.00",
                "36.00",
                "+20.0%",
                "0.75× → 0.82×",
                "40% → 50%"
            ]
        );
        assert_eq!(
            k_line(&text, 4),
            [
                "4",
                "25.00",
                "—",
                "not measured now",
                "0.62× → —",
                "35% → —"
            ]
        );
        assert_eq!(
            k_line(&text, 8),
            ["8", "—", "20.00", "new", "— → 0.45×", "— → 30%"]
        );
        // The rows in the order of k.
        let ks: Vec<&str> = text
            .lines()
            .map(crate::report::cells)
            .filter(|c| c.len() == 6 && c[0] != "k" && !c[0].starts_with('-'))
            .map(|c| c[0])
            .collect();
        assert_eq!(ks, ["0", "2", "4", "8"], "{text}");

        // Changed settings are named once, with their values before and now.
        for r in &mut now {
            r.mode = "draft".into();
            r.draft_model = Some("/d/draft-q4.gguf".into());
            r.ngram_n = None;
            r.batch_invariant = false;
            r.n_gen = 24;
            r.prompt = "task.txt".into();
            r.stamp.threads = 2;
            r.stamp.model_fingerprint = "fedcba9876543210".into();
        }
        let text = spec_comparison(&as_stored(&now), &base);
        let settings = text
            .lines()
            .find(|l| l.starts_with("settings that differ: "))
            .unwrap();
        for needle in [
            "model tiny, \"quoted\".gguf (0123456789abcdef) → tiny, \"quoted\".gguf (fedcba9876543210)",
            "mode ngram → draft",
            "draft none → draft-q4.gguf",
            "ngram-n 3 → —",
            "batch-invariant on → off",
            "n_gen 20 → 24",
            "threads 1 → 2",
            "prompt built-in copy-heavy prompt → task.txt",
        ] {
            assert!(settings.contains(needle), "`{needle}` not in {settings}");
            assert_eq!(settings.matches(needle).count(), 1, "{settings}");
        }
        assert!(!settings.contains("rounds"), "{settings}");
    }

    #[test]
    fn vs_with_a_sweep_takes_the_last_sweep_and_refuses_other_runs() {
        let sweep = stored_run(
            "20250101-000000-aaaa",
            "tokscope bench --spec ngram",
            as_stored(&[
                spec_row(0, 40.0, 1.0, None),
                spec_row(2, 30.0, 0.75, Some(0.4)),
            ]),
        );
        let plain = stored_run(
            "20250102-000000-bbbb",
            "tokscope bench",
            as_stored(&[
                sample_row(TestKind::Pp, "pp16", 1),
                sample_row(TestKind::Tg, "tg8", 1),
            ]),
        );
        let older = StoredRun {
            id: "20241231-000000-cccc".into(),
            ..sweep.clone()
        };
        let runs = vec![older, sweep.clone(), plain.clone()];
        // `last` is the newest sweep, passing over the plain run after it.
        assert_eq!(find_spec_sweep(&runs, "last").unwrap().id, sweep.id);
        assert_eq!(find_spec_sweep(&runs, "20250101").unwrap().id, sweep.id);
        let e = find_spec_sweep(&runs, "20250102").unwrap_err();
        assert!(
            e.contains("run 20250102-000000-bbbb is not a speculative sweep")
                && e.contains("a plain `tokscope bench` run (pp16, tg8)")
                && e.contains("--vs last"),
            "{e}"
        );
        let e = find_spec_sweep(&runs[2..], "last").unwrap_err();
        assert!(
            e.contains("no speculative sweep") && e.contains("--spec ngram"),
            "{e}"
        );
        assert!(find_spec_sweep(&[], "last")
            .unwrap_err()
            .contains("no runs yet"));
        assert!(find_spec_sweep(&runs, "1999")
            .unwrap_err()
            .contains("no run"));
    }

    #[test]
    fn rows_of_every_layout_read_and_a_sweep_s_keep_what_vs_compares() {
        let stored = as_stored(&[spec_row(2, 30.0, 0.75, Some(0.4))]);
        let s = &stored[0].spec;
        assert_eq!(s.draft_max, Some(2));
        assert_eq!((s.speedup_mean, s.acceptance_rate), (Some(0.75), Some(0.4)));
        assert_eq!(s.mode.as_deref(), Some("ngram"));
        assert_eq!((s.ngram_n, s.n_gen, s.rounds), (Some(3), Some(20), Some(1)));
        assert_eq!(stored[0].stamp.threads, Some(1));
        // A bench row has none of them; a field of another type reads as absent.
        let bench = &as_stored(&[sample_row(TestKind::Tg, "tg8", 1)])[0];
        assert!(bench.spec.draft_max.is_none() && bench.spec.mode.is_none());
        let odd: StoredRow = serde_json::from_value(serde_json::json!({
            "kind": "other", "test": "x", "tok_per_s_mean": 1.0,
            "mode": {"not": "a string"}, "draft_max": -3, "stamp": {"threads": "many"}
        }))
        .unwrap();
        assert!(odd.spec.mode.is_none() && odd.spec.draft_max.is_none());
        assert!(odd.stamp.threads.is_none());
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
