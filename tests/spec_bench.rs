//! `bench --spec ngram | --draft FILE --draft-max …`: the speculative sweep on synthetic models
//! through the real binary and real llama.cpp (one thread, a few dozen tokens), its outputs
//! (JSON, CSV, Markdown with the verdict, the chart) and its bad input; and `run --json`'s
//! per-token split of the decode phase under speculation (draft, verify, plain, host).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn tokscope(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("tokscope").unwrap();
    cmd.env("TOKSCOPE_DATA_DIR", home.join("data"))
        .env("TOKSCOPE_CONFIG_DIR", home.join("config"))
        .env_remove("TOKSCOPE_MODEL")
        .env_remove("RUST_BACKTRACE");
    cmd
}

fn no_panic() -> impl Predicate<str> {
    predicate::str::contains("panicked")
        .or(predicate::str::contains("backtrace"))
        .not()
}

fn synth(home: &Path, preset: &str, seed: u32) -> PathBuf {
    let path = home.join(format!("{preset}-{seed}.gguf"));
    tokscope(home)
        .args([
            "synth",
            "--preset",
            preset,
            "--seed",
            &seed.to_string(),
            "-o",
        ])
        .arg(&path)
        .assert()
        .success();
    path
}

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
        let out = tokscope(home.path())
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
            .args(&extra)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
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
