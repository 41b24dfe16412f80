//! `bench --spec ngram | --draft FILE --draft-max …`: the speculative sweep on synthetic models
//! through the real binary and real llama.cpp (one thread, a few dozen tokens), its outputs
//! (JSON, CSV, Markdown with the verdict and the terminal chart, the plotted chart), `--vs` against
//! an earlier sweep, and its bad input; and `run --json`'s per-token split of the decode phase
//! under speculation (draft, verify, plain, host).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::no_panic;
use common::synth_cli as synth;
use common::tokscope_cmd as tokscope;

use std::path::Path;

use predicates::prelude::*;
use serde_json::Value;

/// `bench` on `model` with `extra`, JSON out: (verdict, rows, stderr).
fn sweep_with_stderr(home: &Path, model: &Path, extra: &[&str]) -> (String, Vec<Value>, String) {
    let assert = tokscope(home)
        .args([
            "bench",
            "-n",
            "20",
            "-r",
            "2",
            "-t",
            "1",
            "--no-probe",
            "-o",
            "json",
            "-m",
        ])
        .arg(model)
        .args(extra)
        .assert()
        .success()
        .stderr(no_panic());
    let out = assert.get_output();
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        j["verdict"].as_str().unwrap().to_string(),
        j["rows"].as_array().unwrap().clone(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sweep(home: &Path, model: &Path, extra: &[&str]) -> (String, Vec<Value>) {
    let (verdict, rows, _) = sweep_with_stderr(home, model, extra);
    (verdict, rows)
}

fn f(row: &Value, key: &str) -> f64 {
    row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {row}"))
}

/// What every sweep must satisfy: one row per k in order, k = 0 the baseline at exactly 1×
/// with no acceptance, each round's greedy text the baseline's, the figures consistent.
fn check_rows(rows: &[Value], ks: &[u64]) {
    let got: Vec<u64> = rows
        .iter()
        .map(|r| r["draft_max"].as_u64().unwrap())
        .collect();
    assert_eq!(got, ks, "one row per k, 0 first");
    let base = &rows[0];
    assert_eq!(f(base, "speedup_mean"), 1.0);
    assert_eq!(f(base, "speedup_min"), 1.0);
    assert_eq!(f(base, "speedup_max"), 1.0);
    assert!(base["acceptance_rate"].is_null() && base["acceptance_per_token"].is_null());
    assert!(base["verdict"].is_null());
    for r in rows {
        assert_eq!(r["text_identical"], true, "greedy text differs: {r}");
        let samples = r["samples_tok_per_s"].as_array().unwrap();
        let speedups = r["speedup_per_round"].as_array().unwrap();
        assert_eq!((samples.len(), speedups.len()), (2, 2), "two rounds: {r}");
        let base_samples = base["samples_tok_per_s"].as_array().unwrap();
        for ((s, b), u) in samples.iter().zip(base_samples).zip(speedups) {
            // The speed-up of a round is that round's tok/s over k = 0's in the same round.
            let want = s.as_f64().unwrap() / b.as_f64().unwrap();
            assert!((u.as_f64().unwrap() - want).abs() < 1e-9, "{r}");
        }
        assert!(f(r, "speedup_min") <= f(r, "speedup_mean"));
        assert!(f(r, "speedup_mean") <= f(r, "speedup_max"));
        // The sweep runs on batch-invariant kernels (auto): plain decoding on the default
        // kernels is measured beside it in child runs, a round each, prefill included.
        assert_eq!(r["batch_invariant"], true, "{r}");
        let dk = &r["default_kernels"];
        let decode = dk["decode_tok_per_s"].as_array().unwrap();
        let per_round = dk["speedup_per_round"].as_array().unwrap();
        assert_eq!((decode.len(), per_round.len()), (2, 2), "{r}");
        for ((s, d), u) in samples.iter().zip(decode).zip(per_round) {
            let want = s.as_f64().unwrap() / d.as_f64().unwrap();
            assert!((u.as_f64().unwrap() - want).abs() < 1e-9, "{r}");
        }
        assert!(f(dk, "speedup_min") <= f(dk, "speedup_median"));
        assert!(f(dk, "speedup_median") <= f(dk, "speedup_max"));
        let ratio = f(dk, "prefill_invariant_tok_per_s") / f(dk, "prefill_default_tok_per_s");
        assert!((f(dk, "prefill_ratio") - ratio).abs() < 1e-9, "{r}");
        assert!(f(dk, "prefill_default_tok_per_s") > 0.0, "{r}");
        if r["draft_max"].as_u64().unwrap() > 0 {
            for key in [
                "acceptance_rate",
                "tokens_per_pass",
                "draft_ms_per_step",
                "verify_ms_per_pass",
                "verify_cost_in_passes",
                "expected_speedup",
                "host_us_per_token",
            ] {
                assert!(f(r, key) >= 0.0, "{key}: {r}");
            }
            // ρ is the target's (every engine's measurement pooled): one figure for every k.
            assert_eq!(r["row_cost"], rows[1]["row_cost"], "{r}");
            assert!(f(r, "expected_speedup_compute") <= f(r, "expected_speedup") + 1e-12);
            assert!(r["verdict"].as_str().unwrap().contains("pay"), "{r}");
        }
    }
}

#[test]
fn draft_sweeps_self_draft_accepts_all_and_unrelated_draft_almost_nothing() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth(home.path(), "small", 5);
    let unrelated = synth(home.path(), "tiny", 3);

    let (verdict, rows, stderr) = sweep_with_stderr(
        home.path(),
        &model,
        &["--draft", model.to_str().unwrap(), "--draft-max", "0,2,4"],
    );
    check_rows(&rows, &[0, 2, 4]);
    assert!(
        stderr.contains("warning: the draft model") && stderr.contains("not smaller"),
        "a draft as large as the target cannot pay: {stderr}"
    );
    for r in &rows[1..] {
        assert_eq!(f(r, "acceptance_rate"), 1.0, "itself as draft: {r}");
        assert_eq!(f(r, "acceptance_per_token"), 1.0, "{r}");
        // Every drafted token accepted: k + 1 tokens per pass but near the end of the turn.
        assert!(f(r, "tokens_per_pass") > 1.5, "{r}");
    }
    assert!(verdict.starts_with("Verdict (best k = "), "{verdict}");

    // The list need not hold 0 nor be sorted: 0 is always the baseline.
    let (_, rows) = sweep(
        home.path(),
        &model,
        &["--draft", unrelated.to_str().unwrap(), "--draft-max", "4,2"],
    );
    check_rows(&rows, &[0, 2, 4]);
    for r in &rows[1..] {
        assert!(f(r, "acceptance_rate") < 0.5, "unrelated draft: {r}");
    }
}

#[test]
fn ngram_sweep_with_a_prompt_file_csv_markdown_and_chart() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth(home.path(), "small", 5);
    let (verdict, rows) = sweep(
        home.path(),
        &model,
        &["--spec", "ngram", "--draft-max", "0,3"],
    );
    check_rows(&rows, &[0, 3]);
    assert_eq!(rows[0]["prompt"], "built-in copy-heavy prompt");
    assert!(verdict.contains("best k = 3"), "{verdict}");
    assert_eq!(rows[1]["test"], "tg20+ngram-k3");
    // The run is in the results log, its rows named by k.
    tokscope(home.path())
        .arg("results")
        .assert()
        .success()
        .stdout(predicate::str::contains("tg20+ngram-k0 tg20+ngram-k3"));

    let prompt = home.path().join("prompt.txt");
    std::fs::write(
        &prompt,
        "one two three four one two three four one two three",
    )
    .unwrap();
    let chart = home.path().join("chart.svg");
    let out = tokscope(home.path())
        .args([
            "bench",
            "-n",
            "12",
            "-r",
            "1",
            "-t",
            "1",
            "--no-probe",
            "--spec",
            "ngram",
        ])
        .args(["--draft-max", "2", "-o", "csv", "--spec-prompt"])
        .arg(&prompt)
        .arg("--plot")
        .arg(&chart)
        .arg("-m")
        .arg(&model)
        .assert()
        .success()
        .stderr(predicate::str::contains("Verdict").and(no_panic()))
        .get_output()
        .stdout
        .clone();
    let csv = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "a header and a row per k: {csv}");
    let header = common::csv_fields(lines[0]);
    for col in [
        "draft_max",
        "speedup_mean",
        "speedup_min",
        "speedup_max",
        "acceptance_rate",
        "expected_speedup",
        "verdict",
        "prompt",
    ] {
        assert!(header.iter().any(|h| h == col), "{col} in {header:?}");
    }
    let prompt_col = header.iter().position(|h| h == "prompt").unwrap();
    assert_eq!(common::csv_fields(lines[1])[prompt_col], "prompt.txt");
    let svg = std::fs::read_to_string(home.path().join("chart-spec.svg")).unwrap();
    assert!(svg.contains("Acceptance") && svg.contains("roofline expected"));

    tokscope(home.path())
        .args([
            "bench",
            "-n",
            "8",
            "-r",
            "1",
            "-t",
            "1",
            "--no-probe",
            "--spec",
            "ngram",
        ])
        .args(["--draft-max", "2", "-m"])
        .arg(&model)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("speed-up (min–max)").and(predicate::str::contains(
                "\nVerdict (best k = 2): speculation ",
            )),
        );
}

/// The ids of the results log's runs, oldest first, and each run's rows.
fn logged_runs(home: &Path) -> Vec<(String, Vec<Value>)> {
    std::fs::read_to_string(home.join("data/results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let run: Value = serde_json::from_str(l).unwrap();
            (
                run["id"].as_str().unwrap().to_string(),
                run["rows"].as_array().unwrap().clone(),
            )
        })
        .collect()
}

#[test]
fn markdown_charts_the_sweep_and_vs_compares_it_with_the_last_sweep_k_by_k() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth(home.path(), "small", 5);
    let spec = |extra: &[&str]| {
        tokscope(home.path())
            .args([
                "bench",
                "-r",
                "1",
                "-t",
                "1",
                "--no-probe",
                "--spec",
                "ngram",
            ])
            .arg("-m")
            .arg(&model)
            .args(extra)
            .assert()
    };
    let stdout =
        |a: &assert_cmd::assert::Assert| String::from_utf8(a.get_output().stdout.clone()).unwrap();

    // Nothing to compare with yet: a clear error before anything is measured.
    spec(&["-n", "16", "--vs", "last"]).code(2).stderr(
        predicate::str::contains("--vs last: the results log has no runs yet").and(no_panic()),
    );

    // The first sweep: the chart between the table and the verdict.
    let first = spec(&["-n", "16", "--draft-max", "0,2"]).success();
    let md = stdout(&first);
    let (table_at, chart_at, verdict_at) = (
        md.find("speed-up (min–max)").unwrap(),
        md.find("speed-up by k: █ measured mean, ◆ roofline + compute, │ 1.00× (no speculation)")
            .unwrap_or_else(|| panic!("no chart: {md}")),
        md.find("\nVerdict (best k = 2)").unwrap(),
    );
    assert!(table_at < chart_at && chart_at < verdict_at, "{md}");
    // Under the verdict: each k against plain decoding on the default kernels, and what the
    // batch-invariant kernels cost prefill.
    let against = md
        .find("Against plain decoding on llama.cpp's default kernels (")
        .unwrap_or_else(|| panic!("no default-kernels line: {md}"));
    assert!(
        verdict_at < against && md[against..].contains(" k=2 "),
        "{md}"
    );
    assert!(
        md.contains("Prefill on the batch-invariant kernels: "),
        "{md}"
    );
    let chart_line = |text: &str, k: u32| -> String {
        text.lines()
            .find(|l| l.starts_with(&format!("k={k}  ")))
            .unwrap_or_else(|| panic!("no chart line for k={k}: {text}"))
            .to_string()
    };
    let base = chart_line(&md, 0);
    assert!(
        base.contains("│") && base.contains("1.00× (1.00–1.00)"),
        "{md}"
    );
    // k = 0 runs at its own speed: its bar ends at the 1.00× line.
    assert!(base.contains("█│"), "{md}");
    let two = chart_line(&md, 2);
    // The 1.00× line is in the same column on both k's lines.
    let line_column = |l: &str| l.chars().position(|c| c == '│').unwrap();
    assert_eq!(line_column(&base), line_column(&two), "{md}");
    for line in md
        .lines()
        .skip_while(|l| !l.starts_with("speed-up by k"))
        .take(4)
    {
        assert!(line.chars().count() <= 80, "wider than 80 columns: {line}");
    }

    // A plain bench run after it: `--vs` with it is refused, `--vs last` passes over it.
    tokscope(home.path())
        .args([
            "bench",
            "-p",
            "0",
            "-n",
            "4",
            "-r",
            "1",
            "-t",
            "1",
            "--no-probe",
            "-m",
        ])
        .arg(&model)
        .assert()
        .success();
    let runs = logged_runs(home.path());
    assert_eq!(runs.len(), 2);
    let (sweep_id, sweep_rows) = &runs[0];
    let plain_id = &runs[1].0;
    let refused = spec(&["-n", "16", "--vs", plain_id])
        .code(2)
        .stderr(no_panic());
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert!(
        stderr.contains(&format!("run {plain_id} is not a speculative sweep"))
            && stderr.contains("a plain `tokscope bench` run (tg4)")
            && stderr.contains("--vs last"),
        "{stderr}"
    );
    assert_eq!(
        logged_runs(home.path()).len(),
        2,
        "nothing measured nor saved"
    );

    // The second sweep, one more k and more tokens, against the last sweep.
    let second = spec(&["-n", "20", "--draft-max", "2,3", "--vs", "last"]).success();
    let md = stdout(&second);
    let vs_at = md
        .find(&format!("\nvs run {sweep_id} ("))
        .unwrap_or_else(|| panic!("not compared with the first sweep: {md}"));
    assert!(md.find("\nVerdict").unwrap() < vs_at, "{md}");
    let vs = &md[vs_at..];
    assert!(vs.contains("settings that differ: n_gen 16 → 20\n"), "{vs}");
    assert_eq!(
        common::md_row(vs, "k").unwrap_or_else(|| panic!("{vs}")),
        [
            "k",
            "t/s before",
            "t/s now",
            "t/s",
            "speed-up before → now",
            "accept before → now"
        ],
        "{vs}"
    );
    let row = |k: u32| -> Vec<String> {
        common::md_row(vs, &k.to_string()).unwrap_or_else(|| panic!("no row for k={k}: {vs}"))
    };
    let now_runs = logged_runs(home.path());
    let (second_id, now_rows) = now_runs.last().unwrap();
    assert_ne!(second_id, sweep_id);
    let row_of = |rows: &[Value], k: u64| rows.iter().find(|r| r["draft_max"] == k).cloned();
    let tps = |r: &Option<Value>| match r {
        Some(r) => format!("{:.2}", f(r, "tok_per_s_mean")),
        None => "—".to_string(),
    };
    let times = |r: &Option<Value>| match r {
        Some(r) => format!("{:.2}×", f(r, "speedup_mean")),
        None => "—".to_string(),
    };
    let accept = |r: &Option<Value>| match r.as_ref().and_then(|r| r["acceptance_rate"].as_f64()) {
        Some(a) => format!("{:.0}%", a * 100.0),
        None => "—".to_string(),
    };
    // Each k's figures are the two sweeps' as the log holds them.
    for k in [0, 2, 3] {
        let (before, now) = (row_of(sweep_rows, k), row_of(now_rows, k));
        assert!(now.is_some(), "k={k} measured now");
        let cells = row(k as u32);
        assert_eq!(cells[1], tps(&before), "before, k={k}: {vs}");
        assert_eq!(cells[2], tps(&now), "now, k={k}: {vs}");
        let change = &cells[3];
        if before.is_some() {
            assert!(change.ends_with('%') && change.len() > 2, "k={k}: {vs}");
        } else {
            assert_eq!(change, "new", "k={k}: {vs}");
        }
        assert_eq!(
            cells[4],
            format!("{} → {}", times(&before), times(&now)),
            "k={k}: {vs}"
        );
        assert_eq!(
            cells[5],
            format!("{} → {}", accept(&before), accept(&now)),
            "k={k}: {vs}"
        );
    }
    assert_eq!(row(0)[4], "1.00× → 1.00×", "{vs}");
    assert_eq!(row(0)[5], "— → —", "{vs}");
    // Prompt lookup finds the copied function in 20 tokens: k = 3 accepts some.
    assert!(
        row(3)[5].starts_with("— → ") && row(3)[5].ends_with('%'),
        "{vs}"
    );

    // Another format keeps stdout machine-readable: the comparison goes to stderr.
    let json = spec(&[
        "-n",
        "16",
        "--draft-max",
        "2",
        "-o",
        "json",
        "--vs",
        second_id,
    ])
    .success();
    let j: Value = serde_json::from_slice(&json.get_output().stdout).unwrap();
    assert_eq!(j["rows"].as_array().unwrap().len(), 2);
    let stderr = String::from_utf8_lossy(&json.get_output().stderr).into_owned();
    assert!(
        stderr.contains(&format!("vs run {second_id} (")) && stderr.contains("n_gen 20 → 16"),
        "{stderr}"
    );
    assert!(
        common::md_row(&stderr, "3").is_some() && stderr.contains("not measured now"),
        "{stderr}"
    );
}

#[test]
fn bad_spec_bench_input_is_a_clear_error() {
    let home = tempfile::tempdir().unwrap();
    let model = synth(home.path(), "tiny", 1);
    let missing = home.path().join("missing-draft.gguf");
    let m = model.to_str().unwrap();
    let d = missing.to_str().unwrap();
    let text = home.path().join("notes.gguf");
    std::fs::write(&text, "not a model, just a few words\n".repeat(20)).unwrap();
    let t = text.to_str().unwrap();
    for (args, code, needles) in [
        (
            vec!["--spec", "ngram", "--draft-max", "0,-2"],
            2,
            vec!["--draft-max", "`-2`"],
        ),
        (
            vec!["--spec", "ngram", "--draft-max", "2,x"],
            2,
            vec!["--draft-max", "`x`"],
        ),
        (
            vec!["--spec", "ngram", "--draft", m],
            2,
            vec!["--spec", "--draft", "not both"],
        ),
        (vec!["--draft", d], 3, vec!["--draft", "missing-draft.gguf"]),
        (
            vec!["--draft", t],
            3,
            vec!["--draft", "not a GGUF", "notes.gguf"],
        ),
        (vec!["--spec", "medusa"], 2, vec!["--spec", "`medusa`"]),
        (
            vec!["--spec", "ngram", "--draft-max", "0"],
            2,
            vec!["--draft-max 0"],
        ),
        (vec!["--draft-max", "2"], 2, vec!["--spec ngram or --draft"]),
        (
            vec!["--spec", "ngram", "--batch", "2"],
            2,
            vec!["--batch", "does not apply"],
        ),
        (
            vec!["--spec", "ngram", "--spec-prompt", d],
            2,
            vec!["--spec-prompt", "missing-draft.gguf"],
        ),
        (
            vec!["--spec", "ngram", "--vs", "nope"],
            2,
            vec!["--vs nope", "no run in the results log matches `nope`"],
        ),
    ] {
        let assert = tokscope(home.path())
            .args([
                "bench",
                "-n",
                "4",
                "-r",
                "1",
                "-t",
                "1",
                "--no-probe",
                "-m",
                m,
            ])
            .args(&args)
            .assert()
            .code(code)
            .stderr(no_panic());
        let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
        for n in needles {
            assert!(stderr.contains(n), "{args:?}: `{n}` not in {stderr}");
        }
    }
}

#[test]
fn run_json_splits_the_decode_phase_per_token_under_speculation() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth(home.path(), "small", 5);
    let draft = model.to_str().unwrap().to_string();
    for extra in [
        vec!["--draft", draft.as_str(), "--draft-max", "3"],
        vec!["--spec", "ngram", "--draft-max", "4"],
    ] {
        let out = common::ok_stdout(
            tokscope(home.path())
                .args([
                    "run",
                    "-p",
                    "the cat sat on the mat, the cat sat on the mat, the cat sat",
                    "--temp",
                    "0",
                    "-n",
                    "48",
                    "--ignore-eos",
                    "-t",
                    "1",
                    "--json",
                    "-m",
                ])
                .arg(&model)
                .args(&extra),
        );
        let j: Value = serde_json::from_slice(&out).unwrap();
        let sp = &j["spec"];
        let m = &j["metrics"];
        let tokens = sp["tokens"].as_u64().unwrap();
        assert_eq!(tokens, m["tokens_generated"].as_u64().unwrap(), "{extra:?}");
        let part = |k: &str| {
            let v = sp[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{extra:?}: spec.{k} missing: {sp}"));
            assert!(v >= 0.0 && v.is_finite(), "{extra:?}: {k} = {v}");
            v
        };
        let (draft_ms, verify_ms, plain_ms, host_us) = (
            part("draft_ms_per_token"),
            part("verify_ms_per_token"),
            part("plain_ms_per_token"),
            part("host_us_per_token"),
        );
        // The host figure is the turn's host time, the same as `host`'s.
        let host = j["host"]["host_us_per_token"].as_f64().unwrap();
        assert!((host - host_us).abs() < 1e-6, "{host} vs {host_us}");
        // Verify and plain passes are the turn's decode calls.
        let compute = m["decode_compute_ms"].as_f64().unwrap();
        let passes_ms = (verify_ms + plain_ms) * tokens as f64;
        assert!(
            (passes_ms - compute).abs() <= 0.001 * compute + 0.01,
            "{extra:?}: passes {passes_ms} ms vs decode compute {compute} ms"
        );
        // The parts add up to the decode phase: end of prefill → last token.
        let prefill_done = m["ttft_ms"].as_f64().unwrap() - m["first_sample_ms"].as_f64().unwrap();
        let phase = m["e2e_ms"].as_f64().unwrap() - prefill_done;
        let sum = (draft_ms + verify_ms + plain_ms + host_us / 1000.0) * tokens as f64;
        assert!(
            (sum - phase).abs() <= 0.02 * phase + 0.2,
            "{extra:?}: parts {sum:.3} ms vs decode phase {phase:.3} ms ({sp})"
        );
        if extra[0] == "--draft" {
            // Drafting with the target itself costs about a pass per drafted token: counted
            // twice (also as host time), the sum would miss by far more than the tolerance.
            assert!(draft_ms * tokens as f64 > 0.1 * phase + 1.0, "{sp}");
        }
    }
}
