//! `tokscope doctor tokenizer` and the token counter, on synthetic models that carry Llama 3's
//! real tokenizer: a model built from a tokenizer.json passes with zero mismatches, a model
//! whose vocabulary was broken fails with a readable report and exit code 1, and the token
//! counter agrees with llama.cpp's vocabulary and with what the engine prefills.
//!
//! Llama 3's tokenizer.json: `$TOKSCOPE_LLAMA3_TOKENIZER`, else fetched once with pip into
//! cargo's target dir (see tests/synth_presets.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::tokscope_cmd as tokscope;

use std::path::{Path, PathBuf};

use common::gguf_edit::rewrite;
use predicates::prelude::*;
use tokscope::doctor::builtin_corpus;
use tokscope::gguf::{GgufArray, GgufValue};
use tokscope::synth::{write_model, SynthSpec, TensorType};
use tokscope::tokcount::TokenCounter;

/// A small model (the tiny shape) with Llama 3's full vocabulary.
fn llama3_vocab_model(dir: &Path) -> PathBuf {
    let mut spec = SynthSpec::preset("tiny").unwrap();
    spec.tensor_type = TensorType::Q8_0;
    spec.tokenizer_json = Some(common::llama3_tokenizer().to_path_buf());
    let path = dir.join("llama3-vocab.gguf");
    write_model(&path, &spec).unwrap();
    path
}

#[test]
fn model_built_from_the_tokenizer_passes() {
    let dir = tempfile::tempdir().unwrap();
    let model = llama3_vocab_model(dir.path());
    let n_samples = builtin_corpus().len();
    tokscope(dir.path())
        .args(["doctor", "tokenizer", "-m"])
        .arg(&model)
        .arg("--tokenizer")
        .arg(common::llama3_tokenizer())
        .assert()
        .success()
        .stdout(
            predicate::str::contains(format!("{n_samples} samples"))
                .and(predicate::str::contains("mismatching samples: 0 (0.0%)"))
                .and(predicate::str::contains("PASS")),
        );

    // A text of the user's own: checked whole and line by line.
    let text = dir.path().join("mine.txt");
    std::fs::write(&text, "first line\nsecond line 12345\n").unwrap();
    tokscope(dir.path())
        .args(["doctor", "tokenizer", "-m"])
        .arg(&model)
        .arg("--tokenizer")
        .arg(common::llama3_tokenizer())
        .arg("--text")
        .arg(&text)
        .assert()
        .success()
        .stdout(predicate::str::contains("3 samples").and(predicate::str::contains("PASS")));
}

/// Text from a file reaches llama.cpp's tokenizer as typed text does (`llama::runs`): a line
/// past the length bound is named and not checked; a run under it, which overflowed the main
/// thread's stack with falcon's pre-tokenizer (about 25,000 characters), is tokenized on a
/// thread of its own stack. The process survives either way.
#[test]
fn text_from_a_file_is_bounded_and_never_crashes_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let good = llama3_vocab_model(dir.path());
    let falcon = dir.path().join("falcon-pre.gguf");
    rewrite(&good, &falcon, |key, _| {
        (key == "tokenizer.ggml.pre").then(|| GgufValue::String("falcon".into()))
    });
    let text = dir.path().join("runs.txt");
    std::fs::write(
        &text,
        format!(
            "{}\n{}\n",
            "!".repeat(40_000),
            "A".repeat(tokscope::llama::runs::MAX_CHARS + 1)
        ),
    )
    .unwrap();
    let out = tokscope(dir.path())
        .args(["doctor", "tokenizer", "-m"])
        .arg(&falcon)
        .arg("--tokenizer")
        .arg(common::llama3_tokenizer())
        .arg("--text")
        .arg(&text)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "an exit, not a crash: {:?}\n{stdout}",
        out.status
    );
    assert!(
        stdout.contains("not checked")
            && stdout.contains(&format!(
                "more than the {}",
                tokscope::llama::runs::MAX_CHARS
            )),
        "{stdout}"
    );
    // The whole text and its second line are refused; the first line is checked.
    assert!(stdout.contains("1 samples"), "{stdout}");
}

#[test]
fn broken_vocabularies_fail_with_a_side_by_side_report() {
    let dir = tempfile::tempdir().unwrap();
    let good = llama3_vocab_model(dir.path());

    // The classic conversion bug: the right tokens and merges, the wrong pre-tokenizer.
    let wrong_pre = dir.path().join("wrong-pre.gguf");
    rewrite(&good, &wrong_pre, |key, _| {
        (key == "tokenizer.ggml.pre").then(|| GgufValue::String("default".into()))
    });
    // A vocabulary that lost most of its merges.
    let few_merges = dir.path().join("few-merges.gguf");
    rewrite(&good, &few_merges, |key, value| match (key, value) {
        ("tokenizer.ggml.merges", GgufValue::Array(GgufArray::String(merges))) => Some(
            GgufValue::Array(GgufArray::String(merges[..20_000].to_vec())),
        ),
        _ => None,
    });

    for broken in [&wrong_pre, &few_merges] {
        let output = tokscope(dir.path())
            .args(["doctor", "tokenizer", "--show", "3", "-m"])
            .arg(broken)
            .arg("--tokenizer")
            .arg(common::llama3_tokenizer())
            .assert()
            .code(1)
            .stderr(predicate::str::contains("tokenizer check failed"))
            .get_output()
            .stdout
            .clone();
        let report = String::from_utf8(output).unwrap();
        assert!(report.contains("FAIL"), "{report}");
        assert!(!report.contains("mismatching samples: 0 "), "{report}");
        assert!(
            report.contains("llama.cpp") && report.contains("tokenizers"),
            "{report}"
        );
        // Each shown mismatch marks its first differing row.
        let marked = report.lines().filter(|l| l.starts_with('>')).count();
        assert_eq!(marked, 3, "{report}");
    }
}

#[test]
fn doctor_reports_bad_inputs_with_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    tokscope(dir.path())
        .args(["doctor", "tokenizer", "-m"])
        .arg(dir.path().join("missing.gguf"))
        .arg("--tokenizer")
        .arg(common::llama3_tokenizer())
        .assert()
        .code(3)
        .stderr(predicate::str::contains("missing.gguf"));
    let model = llama3_vocab_model(dir.path());
    tokscope(dir.path())
        .args(["doctor", "tokenizer", "-m"])
        .arg(&model)
        .arg("--tokenizer")
        .arg(dir.path().join("missing.json"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("missing.json"));
}

fn texts() -> Vec<String> {
    let mut texts: Vec<String> = builtin_corpus().into_iter().map(|s| s.text).collect();
    texts.extend(
        [
            "Hello world",
            "What is 12345 + 678?",
            "Tiếng Việt có dấu",
            "emoji 👨‍👩‍👧 ok",
            "fn main() { println!(\"hi\"); }",
            "tell me <|eot_id|> about <|start_header_id|>",
            "   leading and trailing   ",
            "",
        ]
        .map(str::to_owned),
    );
    texts
}

#[test]
fn token_counter_agrees_with_the_model_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    let model = llama3_vocab_model(dir.path());
    let from_vocab = TokenCounter::for_model(&model, None).unwrap();
    assert_eq!(from_vocab.source(), "model vocabulary");
    let from_json = TokenCounter::for_model(&model, Some(common::llama3_tokenizer())).unwrap();
    assert_eq!(from_json.source(), "tokenizer.json");
    // A tokenizer.json beside the model is found without being configured.
    std::fs::copy(
        common::llama3_tokenizer(),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    let beside = TokenCounter::for_model(&model, None).unwrap();
    assert_eq!(beside.source(), "tokenizer.json");
    assert_eq!(
        beside.tokenizer_json(),
        Some(dir.path().join("tokenizer.json").as_path())
    );

    for text in texts() {
        let expected = from_vocab.count(&text);
        assert_eq!(from_json.count(&text), expected, "{text:?}");
        assert_eq!(beside.count(&text), expected, "{text:?}");
    }
    assert_eq!(from_json.count("Hello world"), Some(2));
    assert_eq!(from_json.count("<|eot_id|>"), Some(1));
    assert_eq!(from_json.count(""), Some(0));
}

#[test]
fn token_count_matches_what_the_engine_prefills_for_the_message() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = llama3_vocab_model(dir.path());
    let counter = TokenCounter::for_model(&model, Some(common::llama3_tokenizer())).unwrap();
    let mut engine = common::start(&model, common::settings(1024));
    let mut prompt_tokens = |text: &str| {
        let turn = engine.turn(vec![common::user(text)], common::greedy(), 1);
        turn.prefill_started.expect("prefill started").0
    };
    // The template trims the message, and "a" is one token in any position.
    let baseline = prompt_tokens("a") - counter.count("a").unwrap();
    for text in [
        "Hello world",
        "What is 12345 + 678?",
        "Tiếng Việt có dấu, 中文 and emoji 🎉",
        "fn main() {\n    println!(\"hi\");\n}",
        "two\n\nparagraphs",
    ] {
        assert_eq!(
            prompt_tokens(text) - baseline,
            counter.count(text).unwrap(),
            "{text:?}"
        );
    }
}
