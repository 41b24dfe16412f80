//! `tokscope compare` from the outside, on real llama.cpp with synthetic models: F32 quantized
//! in-process to Q8_0 and Q4_0 (and the cache reused), a model against itself gives KL 0 and
//! the same perplexity, on the same weights KL(Q4_0) > KL(Q8_0) > 0, every output format
//! parses, runtime settings compare like files, and bad inputs give clear errors. One thread
//! per model run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;
use tokscope::compare::Comparison;
use tokscope::gguf::{read_metadata, GgufValue};
use tokscope::synth::TensorType;

/// The binary, isolated from the real home: its own data, config and cache dirs.
fn tokscope(home: &Path) -> Command {
    let mut cmd = common::tokscope_cmd(home);
    cmd.env("TOKSCOPE_CACHE_DIR", home.join("cache"));
    cmd
}

fn small(home: &Path) -> PathBuf {
    common::synth(home, "small.gguf", "small", TensorType::F32, 1)
}

/// Quality-only flags that keep a run short: 64-token chunks, 3 of them, one thread.
const QUICK: &[&str] = &["-c", "64", "--chunks", "3", "-t", "1", "--no-speed"];

fn compare_json(home: &Path, args: &[&str]) -> (Comparison, String) {
    let out = tokscope(home)
        .arg("compare")
        .args(args)
        .args(["-o", "json"])
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let comparison: Comparison = serde_json::from_str(&stdout).unwrap();
    (comparison, String::from_utf8(out.stderr).unwrap())
}

fn kld(c: &Comparison, i: usize) -> f64 {
    c.rows[i].quality.kld_mean.unwrap()
}

#[test]
fn quantizes_in_process_and_kl_grows_as_bits_shrink() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = small(home.path());
    let m = model.to_str().unwrap();
    let mut args = vec!["-m", m, "--quantize", "q8_0,Q4_0"];
    args.extend_from_slice(QUICK);
    let (first, stderr) = compare_json(home.path(), &args);
    assert!(stderr.contains("Q8_0: quantized into"), "{stderr}");

    let quants: Vec<&str> = first.rows.iter().map(|r| r.quantization.as_str()).collect();
    assert_eq!(quants, ["F32", "Q8_0", "Q4_0"]);
    assert!(first.rows[0].reference && !first.rows[0].quantized_here);
    assert!(first.rows[1].quantized_here && first.rows[2].quantized_here);
    assert_eq!(
        first.rows[0].quality.kld_mean, None,
        "the reference has no KL to itself"
    );
    // The quantized files are real GGUFs of the asked type, in the cache.
    for (row, ftype) in first.rows[1..].iter().zip([7u64, 2]) {
        let path = Path::new(&row.model);
        assert!(path.starts_with(home.path().join("cache")), "{}", row.model);
        let header = read_metadata(path).unwrap();
        assert_eq!(
            header.get("general.file_type").and_then(GgufValue::as_u64),
            Some(ftype)
        );
    }
    assert!(first.rows[1].bits_per_weight < first.rows[0].bits_per_weight);
    assert!(first.rows[2].bits_per_weight < first.rows[1].bits_per_weight);
    // Same weights, fewer bits, further from the reference.
    assert!(kld(&first, 1) > 0.0, "Q8_0 is not identical to F32");
    assert!(kld(&first, 2) > kld(&first, 1), "KL(Q4_0) > KL(Q8_0)");
    let q4 = &first.rows[2].quality;
    assert!(
        q4.kld_max.unwrap() >= q4.kld_p99.unwrap() && q4.kld_p99.unwrap() >= q4.kld_median.unwrap()
    );
    assert!(q4.same_top_pct.unwrap() <= 100.0);
    // 3 chunks × (64 − 1 − 32) scored positions.
    assert!(first.rows.iter().all(|r| r.quality.n_scored == 3 * 31));
    assert!(first
        .rows
        .iter()
        .all(|r| r.quality.ppl.is_finite() && r.quality.ppl > 1.0));

    // A second run reuses the cached files and measures the same numbers.
    let (second, stderr) = compare_json(home.path(), &args);
    assert_eq!(stderr.matches("reusing").count(), 2, "{stderr}");
    for (a, b) in first.rows.iter().zip(&second.rows) {
        assert_eq!(a.quality, b.quality);
    }
    // Both runs are in the comparisons log; the latest is the second.
    let log = home.path().join("data").join("comparisons.jsonl");
    let latest = tokscope::compare::log::latest(&log).unwrap().unwrap();
    assert_eq!(latest.id, second.id);
    assert_ne!(first.id, second.id);
}

#[test]
fn requantized_rows_are_marked_and_synthetic_quality_is_not_judged() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let q8 = common::synth(home.path(), "q8.gguf", "small", TensorType::Q8_0, 1);
    let mut args = vec![
        "-m",
        q8.to_str().unwrap(),
        "--quantize",
        "q4_0",
        "--allow-requantize",
        "--max-kld",
        "0.5",
    ];
    args.extend_from_slice(QUICK);
    let (c, stderr) = compare_json(home.path(), &args);
    assert!(stderr.contains("requantizing a Q8_0 file"), "{stderr}");
    assert_eq!(c.rows.len(), 2);
    assert!(c.rows[0].reference, "the quantized source is the reference");
    assert_eq!(c.rows[0].requantized_from, None);
    assert_eq!(c.rows[1].requantized_from.as_deref(), Some("Q8_0"));
    assert_eq!(c.rows[1].quantization, "Q4_0 ← Q8_0");
    assert!(
        c.rows[1].label.ends_with("-Q4_0 ← Q8_0"),
        "{}",
        c.rows[1].label
    );
    // Synthetic weights: the budget and the candidate lines judge no quality.
    assert!(c.rows.iter().all(|r| r.synthetic));
    assert!(
        c.verdict[0].starts_with("Within KLD ≤ 0.5: not judged, the weights are synthetic"),
        "{:?}",
        c.verdict
    );
    assert!(
        c.verdict[1].contains("quality not judged"),
        "{:?}",
        c.verdict
    );
    assert!(
        c.verdict[1].contains("made from a Q8_0 file"),
        "{:?}",
        c.verdict
    );
    // The table reads n/m where a quality figure would be.
    let md = common::ok_stdout(tokscope(home.path()).arg("compare").args(&args));
    let md = String::from_utf8(md).unwrap();
    assert!(md.contains("n/m"), "{md}");
    assert!(md.contains("Q4_0 ← Q8_0"), "{md}");
}

#[test]
fn a_model_against_itself_gives_kl_zero_and_the_same_perplexity() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = small(home.path());
    let copy = home.path().join("copy.gguf");
    std::fs::copy(&model, &copy).unwrap();
    let mut args = vec!["-m", model.to_str().unwrap(), "-m", copy.to_str().unwrap()];
    args.extend_from_slice(QUICK);
    let (c, _) = compare_json(home.path(), &args);
    assert_eq!(c.rows.len(), 2);
    assert!(c.rows[0].reference && !c.rows[1].reference);
    let q = &c.rows[1].quality;
    assert_eq!(q.kld_mean, Some(0.0));
    assert_eq!(q.kld_max, Some(0.0));
    assert_eq!(q.same_top_pct, Some(100.0));
    assert_eq!(q.delta_p_mean_pct, Some(0.0));
    assert_eq!(q.ppl, c.rows[0].quality.ppl);
}

#[test]
fn runtime_settings_compare_like_files() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = small(home.path());
    let mut args = vec!["-m", model.to_str().unwrap(), "-ctk", "f16,q4_0"];
    args.extend_from_slice(QUICK);
    let (c, _) = compare_json(home.path(), &args);
    let labels: Vec<&str> = c.rows.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["small.gguf ctk=f16", "small.gguf ctk=q4_0"]);
    assert!(c.rows[0].reference);
    assert_eq!(c.rows[1].type_k, "q4_0");
    assert!(
        kld(&c, 1) > 0.0,
        "a Q4_0 key cache changes the distributions"
    );

    // A combination llama.cpp refuses is left out with a message; the rest goes on.
    let mut args = vec![
        "-m",
        model.to_str().unwrap(),
        "-ctv",
        "f16,q8_0",
        "-fa",
        "off",
    ];
    args.extend_from_slice(QUICK);
    let (c, stderr) = compare_json(home.path(), &args);
    assert_eq!(c.rows.len(), 1);
    assert!(
        stderr.contains("skipping") && stderr.contains("ctv q8_0"),
        "{stderr}"
    );
}

#[test]
fn every_output_format_parses_and_the_chart_is_drawn() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = small(home.path());
    let m = model.to_str().unwrap();
    let speed = [
        "-m",
        m,
        "--quantize",
        "q4_0",
        "-c",
        "64",
        "--chunks",
        "2",
        "-t",
        "1",
        "-p",
        "16",
        "-n",
        "4",
        "-r",
        "1",
        "--no-probe",
        "--bandwidth-gb-s",
        "10",
    ];
    let plot = home.path().join("pareto.svg");
    let out = tokscope(home.path())
        .arg("compare")
        .args(speed)
        .arg("--plot")
        .arg(&plot)
        .assert()
        .success()
        .get_output()
        .clone();
    let md = String::from_utf8(out.stdout).unwrap();
    assert!(md.starts_with("| candidate"), "{md}");
    assert!(
        md.contains("small.gguf (ref)") && md.contains("small-Q4_0"),
        "{md}"
    );
    assert!(md.contains("Pareto front"), "{md}");
    assert!(md.contains("synthetic weights"), "{md}");
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(
        svg.contains("small-Q4_0"),
        "the chart's key names its points"
    );
    let subtitle = svg
        .lines()
        .find(|l| l.contains("reference small.gguf"))
        .unwrap_or_else(|| panic!("no subtitle:\n{svg}"));
    for part in ["small.gguf", "CPU", "thread(s)", "ctx", "chunks"] {
        assert!(subtitle.contains(part), "{part} missing from {subtitle:?}");
    }

    let (json, _) = compare_json(home.path(), &speed);
    for row in &json.rows {
        assert!(row.tg_tok_per_s.unwrap() > 0.0 && row.pp_tok_per_s.unwrap() > 0.0);
        assert!(row.ceiling_tok_per_s.unwrap() > 0.0 && row.mbu_pct.unwrap() > 0.0);
        assert!(row.cost_per_million_tokens_usd.unwrap() > 0.0);
        assert!(row.synthetic);
    }
    assert!(json.rows.iter().any(|r| r.pareto));
    assert!(!json.verdict.is_empty());

    let out = tokscope(home.path())
        .arg("compare")
        .args(speed)
        .args(["-o", "csv"])
        .assert()
        .success()
        .get_output()
        .clone();
    let csv = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    let header = common::csv_fields(lines[0]);
    for line in &lines[1..] {
        assert_eq!(common::csv_fields(line).len(), header.len());
    }
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let q4 = common::csv_fields(lines[2]);
    assert_eq!(q4[col("quantization")], "Q4_0");
    assert!(q4[col("quality.kld_mean")].parse::<f64>().unwrap() > 0.0);
    assert!(q4[col("tg_tok_per_s")].parse::<f64>().unwrap() > 0.0);

    // The speed rows went to bench's results log too, so `--vs` and `results` see them.
    let results = std::fs::read_to_string(home.path().join("data/results.jsonl")).unwrap();
    let run: Value = serde_json::from_str(results.lines().last().unwrap()).unwrap();
    assert_eq!(
        run["rows"].as_array().unwrap().len(),
        4,
        "pp and tg of two files"
    );
}

#[test]
fn bad_inputs_give_clear_errors() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = small(home.path());
    let m = model.to_str().unwrap();
    let fail = |args: &[&str], code: i32, message: &str| {
        tokscope(home.path())
            .arg("compare")
            .args(args)
            .assert()
            .code(code)
            .stderr(predicate::str::contains(message));
    };
    fail(
        &["-m", m, "--quantize", "q9_9", "--no-speed"],
        2,
        "unknown quantization type `q9_9`",
    );
    fail(&["-m", m, "-o", "xml"], 2, "one of md, md+, csv, json");
    fail(&["-m", m, "--max-kld", "-1"], 2, "--max-kld");
    fail(&["-m", m, "--min-same-top", "101%"], 2, "--min-same-top");
    fail(&["-m", m, "--max-kld", "NaN"], 2, "a number from 0 to 100");
    fail(
        &["-m", "/nonexistent/model.gguf"],
        3,
        "/nonexistent/model.gguf",
    );
    fail(&["-m", m, "--plot", "chart.jpg", "--no-speed"], 2, "--plot");

    let short = home.path().join("short.txt");
    std::fs::write(&short, "Too short to score.").unwrap();
    fail(
        &[
            "-m",
            m,
            "-m",
            m,
            "--text",
            short.to_str().unwrap(),
            "-c",
            "64",
            "--no-speed",
            "-t",
            "1",
        ],
        2,
        "the evaluation text is too short",
    );

    // A text longer than llama.cpp's tokenizer is given is refused with its length named.
    let runs = home.path().join("runs.txt");
    std::fs::write(&runs, "A".repeat(tokscope::llama::runs::MAX_CHARS + 1)).unwrap();
    fail(
        &[
            "-m",
            m,
            "-m",
            m,
            "--text",
            runs.to_str().unwrap(),
            "--no-speed",
            "-t",
            "1",
        ],
        2,
        &format!("{} characters", tokscope::llama::runs::MAX_CHARS + 1),
    );

    // A quantized file is not a source for --quantize (unless asked).
    let q8 = common::synth(home.path(), "q8.gguf", "small", TensorType::Q8_0, 1);
    fail(
        &[
            "-m",
            q8.to_str().unwrap(),
            "--quantize",
            "q4_0",
            "--no-speed",
        ],
        2,
        "needs a high-precision source",
    );

    // Another vocabulary: the same model with one word piece renamed tokenizes differently.
    let other = common::gguf_edit::other_vocab(home.path(), &model);
    fail(
        &[
            "-m",
            m,
            "-m",
            other.to_str().unwrap(),
            "--no-speed",
            "-t",
            "1",
            "-c",
            "64",
        ],
        2,
        "different vocabularies",
    );
}

/// A synthetic file is never the quality reference of real weights (issue #59: `synth --like
/// --type f16` beside a real Q4_1 graded the real model "a severe quality loss"): with more bits
/// per weight than the real file, the synthetic F16 is passed over and the reason named; named
/// with --reference it is refused with what to pass instead; --reference chooses among real
/// files, and the table says why its reference is the reference.
#[test]
fn a_synthetic_file_is_never_the_quality_reference_of_real_weights() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let f16 = common::synth(home.path(), "syn-f16.gguf", "tiny", TensorType::F16, 3);
    let q8 = common::synth(home.path(), "q8.gguf", "tiny", TensorType::Q8_0, 3);
    // A real file: the same Q8_0 without tokscope's synthetic marker.
    let real = home.path().join("real-q8_0.gguf");
    common::gguf_edit::rewrite(&q8, &real, |key, _| {
        (key == tokscope::gguf::SYNTHETIC_METADATA_KEY).then_some(GgufValue::Bool(false))
    });
    let (real_s, f16_s) = (real.to_str().unwrap(), f16.to_str().unwrap());
    let (c, _) = compare_json(home.path(), &[&["-m", real_s, "-m", f16_s], QUICK].concat());
    assert_eq!(c.reference, "real-q8_0.gguf", "{c:?}");
    assert!(
        c.reference_why
            .contains("a synthetic file is no quality reference"),
        "{}",
        c.reference_why
    );
    tokscope(home.path())
        .arg("compare")
        .args(["-m", real_s, "-m", f16_s, "--reference", f16_s])
        .args(QUICK)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("syn-f16.gguf is synthetic"))
        .stderr(predicate::str::contains(
            "pass --reference with a real file",
        ));
    // --reference must be one of the files.
    tokscope(home.path())
        .arg("compare")
        .args(["-m", real_s, "-m", f16_s, "--reference", "other.gguf"])
        .args(QUICK)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not one of the -m files"));
    // Among synthetic files alone, the most bits per weight is the reference, as before.
    let q8_s = q8.to_str().unwrap();
    let (c, _) = compare_json(home.path(), &[&["-m", q8_s, "-m", f16_s], QUICK].concat());
    assert_eq!(c.reference, "syn-f16.gguf");
    assert!(
        c.reference_why.starts_with("the most bits per weight"),
        "{}",
        c.reference_why
    );
}

/// Scoring a chunk in blocks of the micro-batch (the default; the logits held are O(block ×
/// vocabulary), where a whole 8k chunk held 4096 rows per model) gives the figures of one
/// decode call of the whole chunk, as llama-perplexity makes it (`--scoring-block` equal to
/// -c): the same rows, only the sums' order differs. A block that would cut a micro-batch is
/// refused.
#[test]
fn scoring_in_blocks_gives_the_whole_chunks_figures() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = small(home.path());
    let m = model.to_str().unwrap();
    let base = ["-m", m, "--quantize", "q8_0", "-c", "1024", "--chunks", "2"];
    let quick = ["-t", "1", "--no-speed"];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(&quick).chain(extra).copied().collect();
        compare_json(home.path(), &args).0
    };
    let blocks = run(&[]);
    let whole = run(&["--scoring-block", "1024"]);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-12);
    for (b, w) in blocks.rows.iter().zip(&whole.rows) {
        let (b, w) = (&b.quality, &w.quality);
        assert_eq!(b.n_scored, 2 * (1024 - 1 - 512));
        assert_eq!(b.n_scored, w.n_scored);
        assert!(close(b.ppl, w.ppl), "{b:?} {w:?}");
        // The per-position values are the same: their order statistics are equal exactly.
        assert_eq!(b.kld_median, w.kld_median);
        assert_eq!(b.kld_p99, w.kld_p99);
        assert_eq!(b.kld_max, w.kld_max);
        assert_eq!(b.same_top_pct, w.same_top_pct);
        for (x, y) in [
            (b.kld_mean, w.kld_mean),
            (b.delta_p_mean_pct, w.delta_p_mean_pct),
            (b.delta_p_rms_pct, w.delta_p_rms_pct),
        ] {
            assert_eq!(x.is_some(), y.is_some());
            if let (Some(x), Some(y)) = (x, y) {
                assert!(close(x, y), "{x} vs {y}");
            }
        }
    }
    assert!(blocks.rows[1].quality.kld_mean.unwrap() > 0.0);
    tokscope(home.path())
        .arg("compare")
        .args(base)
        .args(quick)
        .args(["--scoring-block", "100"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "a multiple of the micro-batch (512)",
        ));
}
