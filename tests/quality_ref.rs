//! `run --ref`: each answer scored against a reference model through the real binary (issue
//! 34; docs/metrics.md "Per token and per answer"). The same file as its own reference agrees
//! exactly; a quantization of it strays by a measurable, finite amount; the scores line up
//! with the answer token by token (a greedy answer's every token is the model's own top
//! choice); and a reference that is missing, of another vocabulary, or asked of a server is
//! refused with what to do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use crate::common::{self, no_panic, tokscope_cmd};
use predicates::prelude::*;
use serde_json::Value;

const TOKENS: u32 = 24;

/// `run --json --ref REF` greedy, one thread, `TOKENS` tokens.
fn scored(home: &Path, model: &Path, reference: &Path) -> Value {
    scored_with(home, model, reference, &[])
}

/// [`scored`] with more flags.
fn scored_with(home: &Path, model: &Path, reference: &Path, more: &[&str]) -> Value {
    let out = common::ok_stdout(
        tokscope_cmd(home)
            .args([
                "run",
                "-p",
                "Hello there, tell me",
                "--temp",
                "0",
                "--ignore-eos",
                "-t",
                "1",
            ])
            .args(["-n", &TOKENS.to_string(), "--json", "-m"])
            .arg(model)
            .arg("--ref")
            .arg(reference)
            .args(more),
    );
    serde_json::from_slice(&out).expect("stdout is one JSON object")
}

fn synth_typed(home: &Path, ty: &str, seed: u32) -> PathBuf {
    common::synth_cli_typed(home, "small", Some(ty), seed)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn the_same_file_as_reference_agrees_exactly_and_every_score_is_its_tokens() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth_typed(home.path(), "f32", 7);
    let v = scored(home.path(), &model, &model);
    let q = &v["quality"];
    let tokens = q["tokens"].as_array().expect("per-token scores");
    assert_eq!(tokens.len(), TOKENS as usize, "{q}");
    assert_eq!(v["metrics"]["tokens_generated"], TOKENS, "{}", v["metrics"]);
    assert_eq!(q["context_tokens"], v["metrics"]["prompt_tokens"], "{q}");
    let s = &q["summary"];
    assert_eq!(f(&s["kld_mean"]), 0.0, "{s}");
    assert_eq!(f(&s["same_top_pct"]), 100.0, "{s}");
    assert!(s["first_divergence"].is_null(), "{s}");
    assert_eq!(s["tokens"], TOKENS, "{s}");
    // The scores sit on the answer's tokens: a greedy answer's token is the model's own most
    // likely one at its position (scored from batched passes, so a near tie may differ).
    let own_top = tokens
        .iter()
        .filter(|t| t["top_cand"] == t["token"])
        .count();
    assert!(
        own_top * 10 >= tokens.len() * 9,
        "{own_top} of {}: {q}",
        tokens.len()
    );
    let text: String = tokens.iter().map(|t| t["text"].as_str().unwrap()).collect();
    assert_eq!(
        text,
        v["text"].as_str().unwrap(),
        "the scored tokens are the answer's"
    );
    for t in tokens {
        assert_eq!(f(&t["p_ref"]), f(&t["p_cand"]), "{t}");
        assert!(f(&t["entropy_ref"]) >= 0.0, "{t}");
    }
    assert_same_tops(tokens);
    assert_eq!(q["reused_tokens"], 0, "one answer: nothing kept before it");
    // The reference as loaded: its file's size, its layers, none on a GPU here.
    assert_eq!(
        q["reference_file_bytes"].as_u64(),
        Some(std::fs::metadata(&model).unwrap().len()),
        "{q}"
    );
    assert!(q["reference_n_layer"].as_u64().unwrap() > 0, "{q}");
    assert_eq!(q["reference_gpu_layers"], 0, "{q}");
    assert!(
        f(&q["score_ms"]) > 0.0 && f(&q["reference_load_ms"]) > 0.0,
        "{q}"
    );
    assert_eq!(
        q["context_tokens"],
        v["context_used"].as_u64().unwrap() - u64::from(TOKENS) + 1
    );
}

/// On the demo model, whose greedy answer varies from token to token (the synthetic models'
/// repeat one token, so a score read one position off would pass there): every score sits on
/// its own token.
#[test]
fn on_the_demo_model_each_score_is_read_at_its_own_tokens_position() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let demo = common::demo_model();
    let v = scored(home.path(), &demo, &demo);
    let q = &v["quality"];
    let tokens = q["tokens"].as_array().expect("per-token scores");
    let distinct: std::collections::BTreeSet<_> =
        tokens.iter().map(|t| t["token"].to_string()).collect();
    assert!(
        distinct.len() >= TOKENS as usize / 3,
        "a varied answer: {q}"
    );
    let own_top = tokens
        .iter()
        .filter(|t| t["top_cand"] == t["token"])
        .count();
    assert!(
        own_top * 10 >= tokens.len() * 9,
        "{own_top} of {}: {q}",
        tokens.len()
    );
    // And each probability is read at its own token: the most likely token's probability is
    // at least e^(−entropy) (H = −Σ p ln p ≥ −ln p_max), which another token's rarely is.
    for t in tokens.iter().filter(|t| t["top_cand"] == t["token"]) {
        let bound = (-f(&t["entropy_cand"])).exp();
        assert!(
            f(&t["p_cand"]) >= bound * (1.0 - 1e-9),
            "p {} < e^-H {bound}: {t}",
            t["p_cand"]
        );
    }
    assert_eq!(f(&q["summary"]["kld_mean"]), 0.0, "{q}");
    assert_eq!(f(&q["summary"]["same_top_pct"]), 100.0, "{q}");
    assert_same_tops(tokens);
}

/// Each scored position's `TOP_K` most likely tokens of both models, against the same file:
/// the same ids (and texts and probabilities) for both, the first the position's top token,
/// probabilities descending and summing to at most 1, the chosen token's (when among them) its
/// `p_cand`.
fn assert_same_tops(tokens: &[Value]) {
    for t in tokens {
        let (top_ref, top_cand) = (
            t["top_k_ref"].as_array().expect("top_k_ref"),
            t["top_k_cand"].as_array().expect("top_k_cand"),
        );
        assert_eq!(top_cand.len(), tokscope::metrics::quality::TOP_K, "{t}");
        assert_eq!(top_ref, top_cand, "{t}");
        assert_eq!(top_cand[0]["token"], t["top_cand"], "{t}");
        assert_eq!(top_ref[0]["token"], t["top_ref"], "{t}");
        let p: Vec<f64> = top_cand.iter().map(|x| f(&x["p"])).collect();
        assert!(p.windows(2).all(|w| w[0] >= w[1]), "descending: {t}");
        assert!(p.iter().sum::<f64>() <= 1.0 + 1e-6, "{t}");
        if let Some(chosen) = top_cand.iter().find(|x| x["token"] == t["token"]) {
            assert!((f(&chosen["p"]) - f(&t["p_cand"])).abs() <= 1e-6, "{t}");
            assert_eq!(chosen["text"], t["text"], "{t}");
        }
    }
}

/// `run --turns 2 --ref`: the second answer's scoring reads the conversation from the
/// contexts the first one's left, so it reuses at least the first prompt; the first reuses
/// nothing.
#[test]
fn a_second_turn_is_scored_from_the_first_turns_kept_contexts() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth_typed(home.path(), "f32", 7);
    let out = common::ok_stdout(
        tokscope_cmd(home.path())
            .args(["run", "-p", "Hello there, tell me", "--temp", "0"])
            .args([
                "--ignore-eos",
                "-t",
                "1",
                "-n",
                "8",
                "--turns",
                "2",
                "--json",
                "-m",
            ])
            .arg(&model)
            .arg("--ref")
            .arg(&model),
    );
    let turns: Vec<Value> = serde_json::from_slice(&out).expect("a JSON array of turns");
    assert_eq!(turns.len(), 2, "{turns:?}");
    let (first, second) = (&turns[0]["quality"], &turns[1]["quality"]);
    assert_eq!(first["reused_tokens"], 0, "{first}");
    let reused = second["reused_tokens"].as_u64().unwrap();
    assert!(
        reused >= first["context_tokens"].as_u64().unwrap()
            && reused < second["context_tokens"].as_u64().unwrap(),
        "second turn reused {reused}: {second}"
    );
    assert_eq!(f(&second["summary"]["kld_mean"]), 0.0, "{second}");
}

#[test]
fn a_quantization_strays_from_its_full_precision_file_and_stderr_says_how_far() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let full = synth_typed(home.path(), "f32", 7);
    let q4 = synth_typed(home.path(), "q4_0", 7);
    let v = scored_with(home.path(), &q4, &full, &["--confidence"]);
    let s = &v["quality"]["summary"];
    let kld = f(&s["kld_mean"]);
    assert!(kld > 0.0 && kld.is_finite(), "{s}");
    let same = f(&s["same_top_pct"]);
    assert!((0.0..=100.0).contains(&same), "{s}");
    // Held against a second path: `--confidence` computes the model's probability of each
    // chosen token and its distribution's entropy from the logits it sampled from (the
    // one-token decode steps of the answer), the scoring from its own teacher-forced passes
    // of 32 positions in another context. The same distributions computed twice: they agree
    // but for kernels' last bits. And each token's KLD is at least 2 (p_ref − p_model)²
    // (Pinsker: one token's probabilities differ by at most the total variation), with
    // p_model from the confidence path.
    let tokens = v["quality"]["tokens"].as_array().expect("per-token scores");
    let c = &v["confidence"];
    let (p, entropy) = (c["p"].as_array().unwrap(), c["entropy"].as_array().unwrap());
    assert_eq!(tokens.len(), p.len(), "{c}");
    for ((t, p), h) in tokens.iter().zip(p).zip(entropy) {
        let (p, h) = (f(p), f(h));
        let (p_cand, h_cand) = (f(&t["p_cand"]), f(&t["entropy_cand"]));
        assert!(
            (p_cand - p).abs() <= 1e-3 * p.max(1e-3) && (h_cand - h).abs() <= 1e-3 * h.max(1.0),
            "token {}: the scoring's p {p_cand}, entropy {h_cand}; the decode's p {p}, entropy {h}",
            t["token"]
        );
        let floor = 2.0 * (f(&t["p_ref"]) - p).powi(2);
        assert!(
            f(&t["kld"]) >= floor * (1.0 - 1e-6),
            "token {}: KLD {} below Pinsker's bound {floor}",
            t["token"],
            t["kld"]
        );
    }
    // The stderr line carries the same figures.
    tokscope_cmd(home.path())
        .args([
            "run",
            "-p",
            "Hello there, tell me",
            "--temp",
            "0",
            "--ignore-eos",
            "-t",
            "1",
        ])
        .args(["-n", "8", "-m"])
        .arg(&q4)
        .arg("--ref")
        .arg(&full)
        .assert()
        .success()
        .stderr(no_panic())
        .stderr(predicate::str::contains(
            "quality  vs small-f32-7.gguf: KLD mean",
        ))
        .stderr(predicate::str::contains("same top"))
        .stderr(predicate::str::contains(", reference ("))
        .stderr(predicate::str::contains(" MB) loaded in"));
}

#[test]
fn a_reference_that_cannot_score_is_refused_with_what_to_do() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = synth_typed(home.path(), "f32", 7);
    let run = |reference: &Path| {
        let mut cmd = tokscope_cmd(home.path());
        cmd.args(["run", "-p", "Hi", "-n", "4", "-t", "1", "-m"])
            .arg(&model)
            .arg("--ref")
            .arg(reference);
        cmd
    };
    // Missing: named before the model loads, a model problem (exit 3).
    run(&home.path().join("nope.gguf"))
        .assert()
        .code(3)
        .stderr(no_panic())
        .stderr(predicate::str::contains("reference model"))
        .stderr(predicate::str::contains("nope.gguf"));
    // Another vocabulary: the first token that differs, in both.
    let other = common::gguf_edit::other_vocab(home.path(), &model);
    run(&other)
        .assert()
        .code(3)
        .stderr(no_panic())
        .stderr(predicate::str::contains(
            "does not share the model's vocabulary",
        ))
        .stderr(predicate::str::contains("▁zzzq"));
    // A server sends no full distributions.
    tokscope_cmd(home.path())
        .args(["run", "-p", "Hi", "--url", "http://127.0.0.1:9", "--ref"])
        .arg(&model)
        .assert()
        .code(2)
        .stderr(no_panic())
        .stderr(predicate::str::contains("--ref scores a local model"));
}

/// `doctor scoring`: the chat's scoring path over an evaluation text, cut as llama-perplexity
/// cuts it. The same file agrees exactly; a quantization strays, and with the passes cut as
/// llama-perplexity's (`--passes whole`) its figures are `compare`'s, one maths module for
/// both (scripts/compare-llama-perplexity.sh holds both against llama-perplexity itself).
#[test]
fn doctor_scoring_runs_the_chats_path_over_a_text_and_agrees_with_compare() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let full = synth_typed(home.path(), "f32", 7);
    let q4 = synth_typed(home.path(), "q4_0", 7);
    let scoring = |model: &Path, passes: &str| -> Value {
        let out = common::ok_stdout(
            tokscope_cmd(home.path())
                .args(["doctor", "scoring", "-c", "64", "--chunks", "2", "-t", "1"])
                .args(["--passes", passes, "--json", "-m"])
                .arg(model)
                .arg("--ref")
                .arg(&full),
        );
        serde_json::from_slice(&out).expect("stdout is one JSON object")
    };
    let same = scoring(&full, "pieces");
    let q = &same["quality"];
    assert_eq!(same["chunks"], 2, "{same}");
    // Positions 32 … 62 of each 64-token chunk predict the next token: 31 a chunk.
    assert_eq!(q["n_scored"], 62, "{q}");
    assert_eq!(f(&q["kld_mean"]), 0.0, "{q}");
    assert_eq!(f(&q["same_top_pct"]), 100.0, "{q}");
    let whole = scoring(&q4, "whole");
    let pieces = scoring(&q4, "pieces");
    let compare: Value = serde_json::from_slice(&common::ok_stdout(
        tokscope_cmd(home.path())
            .args([
                "compare",
                "-c",
                "64",
                "--chunks",
                "2",
                "-t",
                "1",
                "--no-speed",
            ])
            .args(["-o", "json", "-m"])
            .arg(&full)
            .arg("-m")
            .arg(&q4),
    ))
    .unwrap();
    let c = &compare["rows"][1]["quality"];
    for figure in [
        "ppl",
        "kld_mean",
        "kld_p99",
        "same_top_pct",
        "delta_p_rms_pct",
    ] {
        let (ours, theirs) = (f(&whole["quality"][figure]), f(&c[figure]));
        assert!(
            (ours - theirs).abs() <= 0.01 * theirs.abs() + 1e-9,
            "{figure}: doctor scoring --passes whole {ours}, compare {theirs}"
        );
    }
    let kld = f(&pieces["quality"]["kld_mean"]);
    assert!(kld > 0.0 && kld.is_finite(), "{pieces}");
    assert!(
        (kld - f(&c["kld_mean"])).abs() <= 0.01 * f(&c["kld_mean"]),
        "the chat's passes: KLD mean {kld}, compare {}",
        c["kld_mean"]
    );
    // A text too short for its chunks is the user's to change (exit 2), named.
    let short = home.path().join("short.txt");
    std::fs::write(&short, "A few words only.").unwrap();
    tokscope_cmd(home.path())
        .args(["doctor", "scoring", "-c", "64", "-t", "1", "-m"])
        .arg(&q4)
        .arg("--ref")
        .arg(&full)
        .arg("--text")
        .arg(&short)
        .assert()
        .code(2)
        .stderr(no_panic())
        .stderr(predicate::str::contains("too short").and(predicate::str::contains("-c")));
}
