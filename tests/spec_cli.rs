//! Speculative decoding from the outside: `run --spec ngram` and `--draft` with their figures
//! in `--json` and on stderr, and every bad input with its message and exit code (a missing
//! draft, a file that is not a GGUF, another vocabulary, a draft not smaller than the target,
//! `--draft-max 0`, bad values), never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::no_panic;
use common::synth_cli as synth;
use common::tokscope_cmd as tokscope;

use std::path::Path;

use predicates::prelude::*;

const PROMPT: &str = "the cat sat on the mat, the cat sat on the mat, the cat sat";

fn run_json(home: &Path, model: &Path, extra: &[&str]) -> serde_json::Value {
    let out = common::ok_stdout(
        tokscope(home)
            .args([
                "run", "-p", PROMPT, "--temp", "0", "-n", "40", "-t", "1", "--json", "-m",
            ])
            .arg(model)
            .args(extra),
    );
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn run_json_reports_speculation_and_the_same_text() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth(home.path(), "small", 5);
    let draft = synth(home.path(), "tiny", 3);
    let plain = run_json(home.path(), &model, &[]);
    assert!(plain.get("spec").is_none(), "no speculation, no figures");
    for extra in [
        vec!["--spec", "ngram"],
        vec!["--spec", "ngram", "--ngram-n", "2", "--draft-max", "4"],
        vec!["--draft", draft.to_str().unwrap(), "--draft-max", "3"],
    ] {
        let j = run_json(home.path(), &model, &extra);
        assert_eq!(j["text"], plain["text"], "{extra:?}: the same greedy text");
        let sp = &j["spec"];
        for key in [
            "acceptance_rate",
            "accepted_per_verify_pass",
            "tokens_per_pass",
            "passes_per_token",
            "draft_ms_per_step",
            "verify_ms_per_pass",
            "expected_speedup",
            "measured_speedup",
        ] {
            assert!(sp.get(key).is_some(), "{extra:?}: spec.{key} missing: {sp}");
        }
        // The roofline's compute term, measured when the engine loaded: ρ ≥ 0, and the
        // expectation with it is the formula at the turn's α, mean k and draft cost.
        let rho = sp["row_cost"].as_f64().unwrap_or(-1.0);
        assert!(rho.is_finite() && rho >= 0.0, "{extra:?}: row_cost {sp}");
        if let (Some(a), Some(k)) = (
            sp["acceptance_per_token"].as_f64(),
            sp["mean_draft_len"].as_f64(),
        ) {
            let c = sp["draft_cost_ratio"].as_f64().unwrap();
            let verify = sp["verify_passes"].as_f64().unwrap();
            let share = verify / (verify + sp["plain_passes"].as_f64().unwrap());
            let want = tokscope::metrics::spec::expected_speedup_over_steps(a, k, c, rho, share);
            let got = sp["expected_speedup_compute"].as_f64().unwrap();
            assert!((got - want).abs() < 1e-9, "{extra:?}: {got} against {want}");
            assert!(got <= sp["expected_speedup"].as_f64().unwrap() + 1e-12);
        }
        let drafted = sp["drafted"].as_u64().unwrap();
        let accepted = sp["accepted"].as_u64().unwrap();
        assert!(accepted <= drafted);
        if drafted > 0 {
            let rate = sp["acceptance_rate"].as_f64().unwrap();
            assert!((rate - accepted as f64 / drafted as f64).abs() < 1e-9);
        }
    }
}

#[test]
fn human_summary_has_a_spec_line() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth(home.path(), "small", 5);
    tokscope(home.path())
        .args([
            "run", "-p", PROMPT, "--temp", "0", "-n", "24", "-t", "1", "--spec", "ngram", "-m",
        ])
        .arg(&model)
        .assert()
        .success()
        .stderr(
            predicate::str::contains("spec     ngram k≤8")
                .and(predicate::str::contains("expected"))
                .and(predicate::str::contains("with the compute term, ρ ")),
        );
}

#[test]
fn bad_draft_files_are_refused_with_the_draft_named() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth(home.path(), "small", 5);
    tokscope(home.path())
        .args(["run", "-p", "Hi", "--temp", "0", "-n", "4", "-t", "1", "-m"])
        .arg(&model)
        .args(["--draft"])
        .arg(home.path().join("missing.gguf"))
        .assert()
        .code(3)
        .stderr(
            predicate::str::contains("draft model")
                .and(predicate::str::contains("missing.gguf"))
                .and(no_panic()),
        );
    let text = home.path().join("notes.gguf");
    std::fs::write(&text, "this is not a model, just some text\n".repeat(100)).unwrap();
    tokscope(home.path())
        .args(["run", "-p", "Hi", "--temp", "0", "-n", "4", "-t", "1", "-m"])
        .arg(&model)
        .arg("--draft")
        .arg(&text)
        .assert()
        .code(3)
        .stderr(
            predicate::str::contains("draft model")
                .and(predicate::str::contains("not a GGUF"))
                .and(no_panic()),
        );
}

#[test]
fn a_draft_not_smaller_than_the_target_gets_a_warning() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth(home.path(), "tiny", 5);
    let bigger = synth(home.path(), "small", 6);
    tokscope(home.path())
        .args(["run", "-p", "Hi", "--temp", "0", "-n", "6", "-t", "1", "-m"])
        .arg(&model)
        .arg("--draft")
        .arg(&bigger)
        .assert()
        .success()
        .stderr(
            predicate::str::contains("warning: the draft model")
                .and(predicate::str::contains("cannot pay")),
        );
    // A smaller draft: no such warning.
    tokscope(home.path())
        .args(["run", "-p", "Hi", "--temp", "0", "-n", "6", "-t", "1", "-m"])
        .arg(&bigger)
        .arg("--draft")
        .arg(&model)
        .assert()
        .success()
        .stderr(predicate::str::contains("cannot pay").not());
}

#[test]
fn float_weights_under_batch_invariant_kernels_get_a_warning() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let f32_model = synth(home.path(), "tiny", 5);
    let q8 = home.path().join("tiny-q8.gguf");
    tokscope(home.path())
        .args(["synth", "--preset", "tiny", "--type", "q8_0", "-o"])
        .arg(&q8)
        .assert()
        .success();
    let run = |model: &Path, extra: &[&str]| {
        let out = tokscope(home.path())
            .args(["run", "-p", "Hi", "--temp", "0", "-n", "4", "-t", "1", "-m"])
            .arg(model)
            .args(["--spec", "ngram"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let warned = run(&f32_model, &[]);
    assert!(
        warned.contains("warning: F32 weights") && warned.contains("near tie"),
        "{warned}"
    );
    assert!(!run(&f32_model, &["--batch-invariant", "off"]).contains("F32 weights"));
    assert!(!run(&q8, &[]).contains("weights: llama.cpp computes"));
}

#[test]
fn draft_max_zero_turns_speculation_off() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth(home.path(), "small", 5);
    let j = run_json(
        home.path(),
        &model,
        &["--spec", "ngram", "--draft-max", "0"],
    );
    assert!(j.get("spec").is_none(), "{j}");
}

#[test]
fn bad_speculation_flags_and_keys_are_usage_errors() {
    let home = tempfile::tempdir().unwrap();
    let model = home.path().join("unused.gguf");
    for (args, says) in [
        (vec!["--spec", "guess"], "unknown speculation mode"),
        (vec!["--spec", "draft"], "needs a draft model"),
        (
            vec!["--spec", "ngram", "--draft-max", "-1"],
            "spec.draft_max",
        ),
        (
            vec!["--spec", "ngram", "--draft-max", "65"],
            "spec.draft_max",
        ),
        (
            vec!["--spec", "ngram", "--draft-p-min", "1.5"],
            "spec.draft_p_min",
        ),
        (vec!["--spec", "ngram", "--ngram-n", "0"], "spec.ngram_n"),
        (
            vec!["--spec", "ngram", "--draft-min", "9"],
            "must not exceed draft_max",
        ),
        (
            vec!["--spec", "ngram", "--batch-invariant", "maybe"],
            "spec.batch_invariant",
        ),
    ] {
        tokscope(home.path())
            .args(["run", "-p", "Hi", "-m"])
            .arg(&model)
            .args(&args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(says).and(no_panic()));
    }
    let config = home.path().join("c.toml");
    for (toml, says) in [
        ("[spec]\ndraft_maximum = 3\n", "draft_maximum"),
        (
            "[spec]\nbatch_invariant = \"sometimes\"\n",
            "spec.batch_invariant",
        ),
        ("[spec]\nmode = \"draft\"\n", "needs a draft model"),
    ] {
        std::fs::write(&config, toml).unwrap();
        tokscope(home.path())
            .args(["--config"])
            .arg(&config)
            .args(["run", "-p", "Hi", "-m"])
            .arg(&model)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(says).and(no_panic()));
    }
    tokscope(home.path())
        .args([
            "bench",
            "--spec",
            "ngram",
            "--batch-invariant",
            "maybe",
            "-m",
        ])
        .arg(&model)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--batch-invariant: use auto, on or off").and(no_panic()));
}

#[test]
fn config_keys_select_speculation() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth(home.path(), "small", 5);
    let config = home.path().join("c.toml");
    std::fs::write(
        &config,
        "[spec]\nmode = \"ngram\"\ndraft_max = 5\nngram_n = 2\n",
    )
    .unwrap();
    let out = common::ok_stdout(
        tokscope(home.path())
            .args(["--config"])
            .arg(&config)
            .args([
                "run", "-p", PROMPT, "--temp", "0", "-n", "24", "-t", "1", "--json", "-m",
            ])
            .arg(&model),
    );
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(j["spec"]["mode"], "ngram");
    assert_eq!(j["spec"]["draft_max"], 5);
    tokscope(home.path())
        .args(["--config"])
        .arg(&config)
        .args(["config", "show"])
        .assert()
        .success()
        .stdout(predicate::str::contains("[spec]").and(predicate::str::contains("draft_max = 5")));
}
