//! `bench --run-vs-tg`: `run`'s engine against bench's tg on one engine thread, on a synthetic model
//! through the real binary and real llama.cpp (one thread, a few tokens): the rows, the paired
//! ratios recomputed from the per-round figures, the verdict lines, the results log, and bad
//! input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use predicates::prelude::*;
use serde_json::Value;

use common::tokscope_cmd as tokscope;

fn f(row: &Value, key: &str) -> f64 {
    row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {row}"))
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

#[test]
fn run_lanes_are_paired_with_tg_round_by_round() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = common::tiny(home.path());
    let out = tokscope(home.path())
        .args(["bench", "--run-vs-tg", "512", "--tg-sampling"])
        .args([
            "-n", "12", "-r", "3", "-t", "1", "-b", "256", "-o", "json", "-m",
        ])
        .arg(&model)
        .assert()
        .success()
        .stderr(predicate::str::contains("panicked").not())
        .get_output()
        .clone();
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // tg first, then greedy and the configured chain (temperature 0.8) at the given context.
    let lanes: Vec<(String, u64, String)> = rows
        .iter()
        .map(|r| {
            (
                r["lane"].as_str().unwrap().to_string(),
                r["n_ctx"].as_u64().unwrap(),
                r["sampling"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, u64, String)> = [
        ("tg", 12, "none"),
        ("run", 512, "greedy"),
        ("run", 512, "chain"),
    ]
    .iter()
    .map(|(l, c, s)| (l.to_string(), *c, s.to_string()))
    .collect();
    assert_eq!(lanes, want);
    let tg = &rows[0];
    let tg_tps = floats(&tg["samples_tok_per_s"]);
    assert_eq!(tg_tps.len(), 3);
    assert!(tg["ratio"].is_null() && tg["verdict"].is_null(), "{tg}");
    assert_eq!(tg["test"], "tg12");
    for r in &rows {
        assert_eq!(r["kind"], "run-vs-tg");
        // One engine serves every lane, at run's context and bench's runtime flags (-b).
        assert_eq!(r["stamp"]["n_ctx"], 512, "{r}");
        assert_eq!(r["stamp"]["n_batch"], 256, "{r}");
        assert!(f(r, "decode_call_ms") > 0.0, "{r}");
        assert!(f(r, "host_us_per_token") >= 0.0, "{r}");
        let tps = floats(&r["samples_tok_per_s"]);
        assert!(tps.iter().all(|t| *t > 0.0), "{r}");
        let per_round = floats(&r["ratio_per_round"]);
        // Each round's ratio is that round's tok/s over tg's in the same round.
        for ((p, t), g) in per_round.iter().zip(&tps).zip(&tg_tps) {
            assert!((p - t / g).abs() < 1e-9, "{r}");
        }
        if r["lane"] == "run" {
            let ratio = &r["ratio"];
            assert_eq!(ratio["rounds"], 3);
            assert!(
                (f(ratio, "median") - median(&per_round)).abs() < 1e-12,
                "{r}"
            );
            assert!(f(ratio, "two_se") >= 0.0 && f(ratio, "min") <= f(ratio, "max"));
            assert!(
                ["met", "missed", "unsettled"].contains(&r["verdict"].as_str().unwrap()),
                "{r}"
            );
            assert!(f(&r["decode_call_ratio"], "median") > 0.0, "{r}");
            let sampler = r["sampler"].as_str().unwrap();
            if r["sampling"] == "greedy" {
                assert_eq!(sampler, "host-greedy", "{r}");
            } else {
                assert!(sampler != "host-greedy" && sampler != "none", "{r}");
            }
            assert_eq!(
                r["test"],
                format!("run12-c512-{}", r["sampling"].as_str().unwrap())
            );
        }
    }
    // One verdict line per run lane on stderr (stdout stays JSON).
    assert_eq!(stderr.matches("÷ tg: ").count(), 2, "{stderr}");
    // The rows went to the results log.
    let log = std::fs::read_to_string(home.path().join("data/results.jsonl")).unwrap();
    assert!(log.contains("\"kind\":\"run-vs-tg\""), "{log}");
}

#[test]
fn markdown_has_the_table_and_a_verdict_per_lane() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = common::tiny(home.path());
    tokscope(home.path())
        .args([
            "bench",
            "--run-vs-tg",
            "-n",
            "8",
            "-r",
            "3",
            "-t",
            "1",
            "-m",
        ])
        .arg(&model)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("tg (llama-bench's test)")
                .and(predicate::str::contains("run (host-greedy)"))
                // The configured context (4096) when no CTX is given.
                .and(predicate::str::contains("run c4096 greedy ÷ tg: "))
                .and(predicate::str::contains(
                    "3 round(s) ABBA on one engine thread",
                )),
        );
}

#[test]
fn bad_run_vs_tg_input_is_a_clear_error() {
    let home = tempfile::tempdir().unwrap();
    let model = common::tiny(home.path());
    let m = model.to_str().unwrap();
    for (args, code, needles) in [
        (vec!["--run-vs-tg", "x"], 2, vec!["--run-vs-tg", "`x`"]),
        (vec!["--run-vs-tg", "8"], 2, vec!["--run-vs-tg", "`8`"]),
        (
            vec!["--run-vs-tg", "512,1024"],
            2,
            vec!["--run-vs-tg", "`512,1024`"],
        ),
        (
            vec!["--run-vs-tg", "-p", "64"],
            2,
            vec!["-p/--n-prompt", "--run-vs-tg"],
        ),
        (
            vec!["--run-vs-tg", "-n", "8,16"],
            2,
            vec!["-n/--n-gen", "one value"],
        ),
        (vec!["--run-vs-tg", "-o", "csv"], 2, vec!["csv", "json"]),
        (
            vec!["--run-vs-tg", "-fa", "0,1"],
            2,
            vec!["-fa/--flash-attn", "one value with --run-vs-tg"],
        ),
        (
            vec!["--run-vs-tg", "--spec", "ngram"],
            2,
            vec!["--run-vs-tg", "--spec"],
        ),
        (vec!["--run-vs-tg", "-m", m], 2, vec!["give -m once"]),
        (
            vec!["--run-vs-tg", "--vs", "last"],
            2,
            vec!["--vs does not apply to --run-vs-tg"],
        ),
    ] {
        let out = tokscope(home.path())
            .args(["bench", "-m", m])
            .args(&args)
            .assert()
            .code(code)
            .get_output()
            .clone();
        let stderr = String::from_utf8_lossy(&out.stderr);
        for n in &needles {
            assert!(stderr.contains(n), "{args:?}: {n} not in {stderr}");
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A missing model: exit 3, named.
    tokscope(home.path())
        .args(["bench", "--run-vs-tg", "-m"])
        .arg(home.path().join("nope.gguf"))
        .assert()
        .code(3)
        .stderr(predicate::str::contains("nope.gguf"));
}
