//! No typed or pasted text ends the process, whatever the model's pre-tokenizer: every
//! pre-tokenizer the linked llama.cpp ships (read from its `llama-vocab.cpp`), on a BPE model
//! with Llama 3's vocabulary, is handed runs at the bounds of `llama::runs` (`MAX_RUN`, digits
//! `MAX_DIGIT_RUN`, whitespace `MAX_SPACE_RUN`) of every class (letters, punctuation, digits,
//! spaces, CJK, emoji) through the real binary's engine
//! thread; and a run one longer is refused with the message, never tokenized. The built-in
//! SentencePiece vocabulary gets shorter runs (its tokenizer is quadratic in byte-fallback
//! runs). (llama.cpp's regex pre-tokenizers recurse once per character of a match: before the
//! bound, 6,400 'A' crashed deepseek-llm.) The same text then holds a run of a character of
//! every Unicode general category (and the sequences that combine them: combining marks piled
//! on one letter, ZWJ emoji, flags, bidi controls, private use, unassigned code points) and is
//! padded with mixed words to one line of 1 MiB.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use crate::common;
use tokscope::gguf::GgufValue;
use tokscope::llama::runs::{MAX_DIGIT_RUN, MAX_RUN, MAX_SPACE_RUN, MAX_SPM_RUN};

/// The pre-tokenizer names llama.cpp's vocabulary loader knows, from the source the build
/// used (cargo's registry copy of llama-cpp-sys-2, at the version Cargo.lock pins).
fn shipped_pre_tokenizers() -> Vec<String> {
    let lock =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock")).unwrap();
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"llama-cpp-sys-2\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .map(|v| v.trim_end_matches('"').to_string())
        .expect("llama-cpp-sys-2 in Cargo.lock");
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"));
    let source = std::fs::read_dir(cargo_home.join("registry/src"))
        .expect("cargo's registry sources")
        .filter_map(Result::ok)
        .map(|d| {
            d.path().join(format!(
                "llama-cpp-sys-2-{version}/llama.cpp/src/llama-vocab.cpp"
            ))
        })
        .find(|p| p.is_file())
        .expect("llama.cpp's llama-vocab.cpp in cargo's registry");
    let text = std::fs::read_to_string(source).unwrap();
    let mut names: Vec<String> = text
        .split("tokenizer_pre == \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Runs of `MAX_RUN` characters of each class (whitespace: `MAX_SPACE_RUN`), adjacent runs
/// of different classes; for the `whitespace` pre-tokenizer, single spaces.
fn runs_text(pre: &str) -> String {
    let space = if pre == "whitespace" {
        1
    } else {
        MAX_SPACE_RUN
    };
    [
        ("A", MAX_RUN),
        ("!", MAX_RUN),
        ("1", MAX_DIGIT_RUN),
        (" ", space),
        ("日", MAX_RUN),
        ("😀", MAX_RUN),
        ("é", MAX_RUN),
    ]
    .iter()
    .map(|(c, n)| c.repeat(*n))
    .collect()
}

/// A character of every Unicode general category (surrogates excepted: they cannot stand in
/// UTF-8 text), and sequences that combine them.
const CATEGORIES: &[(&str, &str)] = &[
    ("Lu", "Ж"),
    ("Ll", "ж"),
    ("Lt", "\u{1C5}"),
    ("Lm", "\u{2B0}"),
    ("Lo", "ا"),
    ("Lo", "ก"),
    ("Lo", "ש"),
    ("Lo", "한"),
    ("Mn", "\u{301}"),
    ("Mc", "\u{903}"),
    ("Me", "\u{20DD}"),
    ("Nd", "\u{663}"),
    ("Nl", "\u{216B}"),
    ("No", "½"),
    ("Pc", "\u{203F}"),
    ("Pd", "—"),
    ("Ps", "（"),
    ("Pe", "）"),
    ("Pi", "«"),
    ("Pf", "»"),
    ("Po", "¿"),
    ("Sm", "∑"),
    ("Sc", "€"),
    ("Sk", "\u{2DA}"),
    ("So", "☃"),
    ("Zs", "\u{A0}"),
    ("Zs", "\u{3000}"),
    ("Zl", "\u{2028}"),
    ("Zp", "\u{2029}"),
    ("Cc", "\u{1}"),
    ("Cc", "\u{7F}"),
    ("Cc", "\u{85}"),
    ("Cf", "\u{200B}"),
    ("Cf", "\u{202E}"),
    ("Cf", "\u{FEFF}"),
    ("Co", "\u{E000}"),
    ("Cn", "\u{378}"),
    ("Cn", "\u{FFFF}"),
    ("ZWJ emoji", "👩\u{200D}💻"),
    ("flag", "🇺🇳"),
    ("variation selector", "☃\u{FE0F}"),
];

/// How often each category's character repeats in its run.
const CATEGORY_RUN: usize = 1_000;

/// Every category's run, each after a character of another class so that no two runs join
/// into one past the bounds (whitespace alone for the `whitespace` pre-tokenizer, which takes
/// no two in a row), then mixed words up to one line of 1 MiB.
fn categories_and_a_mib_line(pre: &str, mut text: String) -> String {
    for (_, c) in CATEGORIES {
        let first = c.chars().next().unwrap();
        let n = if pre == "whitespace" && c.chars().any(char::is_whitespace) {
            1
        } else {
            CATEGORY_RUN
        };
        text.push(if first.is_alphabetic() { '-' } else { 'x' });
        text.push_str(&c.repeat(n));
    }
    text.push(' ');
    while text.len() < 1 << 20 {
        text.push_str("word123 naïve 日本語, 😀 ¿qué? ");
    }
    assert!(!text.contains('\n'));
    text
}

/// Where a GGUF string value sits: (offset of its u64 length, offset past its bytes).
fn string_value(bytes: &[u8], key: &str) -> (usize, usize) {
    let mut needle = (key.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(key.as_bytes());
    needle.extend_from_slice(&8u32.to_le_bytes()); // GGUF type 8: string
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .unwrap_or_else(|| panic!("{key} not found"))
        + needle.len();
    let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    (at, at + 8 + len)
}

/// `base` with `tokenizer.ggml.pre` set to `pre`, `general.name` shortened or padded by as
/// much so that the header keeps its length and every tensor its offset (a rewrite through
/// the GGUF writer takes seconds per file; this takes a copy).
fn with_pre(base: &[u8], pre: &str) -> Vec<u8> {
    let (name_len_at, name_end) = string_value(base, "general.name");
    let (pre_len_at, pre_end) = string_value(base, "tokenizer.ggml.pre");
    assert!(name_end <= pre_len_at, "general.name comes first");
    let old_pre = pre_end - pre_len_at - 8;
    let old_name = &base[name_len_at + 8..name_end];
    let name_len = (old_name.len() + old_pre)
        .checked_sub(pre.len())
        .expect("general.name long enough to pad");
    let mut name: Vec<u8> = old_name
        .iter()
        .copied()
        .chain(std::iter::repeat(b' '))
        .take(name_len)
        .collect();
    name.truncate(name_len);
    let mut out = Vec::with_capacity(base.len());
    out.extend_from_slice(&base[..name_len_at]);
    out.extend_from_slice(&(name.len() as u64).to_le_bytes());
    out.extend_from_slice(&name);
    out.extend_from_slice(&base[name_end..pre_len_at]);
    out.extend_from_slice(&(pre.len() as u64).to_le_bytes());
    out.extend_from_slice(pre.as_bytes());
    out.extend_from_slice(&base[pre_end..]);
    assert_eq!(out.len(), base.len());
    out
}

/// `tokscope run` on `model` with the message in `prompt`: (exit code, signal, stderr).
fn run(home: &Path, model: &Path, prompt: &Path) -> (Option<i32>, Option<i32>, String) {
    let out = common::tokscope_cmd(home)
        // A pre-tokenizer that takes minutes over the text is a hang (nothing cancels it).
        .timeout(std::time::Duration::from_secs(60))
        .args(["run", "-t", "1", "-n", "1", "-m"])
        .arg(model)
        .arg("-f")
        .arg(prompt)
        .output()
        .unwrap();
    (
        out.status.code(),
        out.status.signal(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The text reached llama.cpp's tokenizer and came back: the prompt was counted (and is too
/// long for the default context, so nothing is decoded).
fn survived(outcome: &(Option<i32>, Option<i32>, String)) -> bool {
    outcome.1.is_none() && outcome.2.contains("but the context holds")
}

/// The file itself was refused at load, before any text: llama.cpp aborted on it in the
/// child-process probe (a vocabulary this pre-tokenizer cannot take), and the process lived.
fn refused_at_load(outcome: &(Option<i32>, Option<i32>, String)) -> bool {
    outcome.1.is_none()
        && outcome
            .2
            .contains("tried it in a separate process and kept running")
}

#[test]
fn every_pre_tokenizer_takes_the_longest_runs_handed_to_it() {
    // It keeps both cores busy for a minute: hold the model lock, so that no test that
    // times llama.cpp (the profiler's physics, run vs llama-bench) shares the CPU with it.
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let base = home.path().join("bpe.gguf");
    common::tokscope_cmd(home.path())
        .args([
            "synth",
            "--preset",
            "llama3.2-1b",
            "--layers",
            "1",
            "--embd",
            "64",
            "--heads",
            "1",
            "--kv-heads",
            "1",
            "--ff",
            "64",
            "--tokenizer",
        ])
        .arg(common::llama3_tokenizer())
        .arg("-o")
        .arg(&base)
        .assert()
        .success();
    let past = home.path().join("past-bound.txt");
    std::fs::write(&past, format!("hello {}", "!".repeat(MAX_RUN + 1))).unwrap();

    let base_bytes = std::fs::read(&base).unwrap();
    let names = shipped_pre_tokenizers();
    assert!(names.len() >= 40, "too few pre-tokenizers found: {names:?}");
    assert!(names.iter().any(|n| n == "deepseek-llm"), "{names:?}");
    // Two pre-tokenizers at a time (each run is one thread: llama.cpp's tokenizer), as the
    // 1 MiB line takes seconds each.
    let one = |name: &String| {
        let started = std::time::Instant::now();
        let model = home.path().join(format!("pre-{name}.gguf"));
        std::fs::write(&model, with_pre(&base_bytes, name)).unwrap();
        let text = home.path().join(format!("at-bound-{name}.txt"));
        std::fs::write(&text, categories_and_a_mib_line(name, runs_text(name))).unwrap();
        let outcome = run(home.path(), &model, &text);
        std::fs::remove_file(&model).unwrap();
        std::fs::remove_file(&text).unwrap();
        (name.clone(), started.elapsed(), outcome)
    };
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let even: Vec<&String> = names.iter().step_by(2).collect();
        let odd: Vec<&String> = names.iter().skip(1).step_by(2).collect();
        let a = scope.spawn(|| even.into_iter().map(one).collect::<Vec<_>>());
        let b = scope.spawn(|| odd.into_iter().map(one).collect::<Vec<_>>());
        let mut all = a.join().unwrap();
        all.extend(b.join().unwrap());
        all
    });
    let mut failures = Vec::new();
    let mut refused = Vec::new();
    let mut slowest = (std::time::Duration::ZERO, String::new());
    for (name, took, outcome) in outcomes {
        if took > slowest.0 {
            slowest = (took, name.clone());
        }
        if refused_at_load(&outcome) {
            refused.push(name.clone());
        } else if !survived(&outcome) {
            let tail: String = outcome
                .2
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ");
            failures.push(format!(
                "{name}: exit {:?} signal {:?}: {tail}",
                outcome.0, outcome.1
            ));
        }
    }
    eprintln!(
        "slowest pre-tokenizer run: {} in {:?}",
        slowest.1, slowest.0
    );
    assert!(
        failures.is_empty(),
        "pre-tokenizers that did not take the runs:\n{}",
        failures.join("\n")
    );

    // One past the bound is refused by tokscope, before llama.cpp sees it.
    let deepseek = home.path().join("deepseek.gguf");
    std::fs::write(&deepseek, with_pre(&base_bytes, "deepseek-llm")).unwrap();
    let header = tokscope::gguf::read_metadata(&deepseek).unwrap();
    assert_eq!(
        header.get("tokenizer.ggml.pre"),
        Some(&GgufValue::String("deepseek-llm".into()))
    );
    let (code, signal, stderr) = run(home.path(), &deepseek, &past);
    assert_eq!((code, signal), (Some(1), None), "{stderr}");
    assert!(stderr.contains("a run of 50001 characters"), "{stderr}");
    assert!(stderr.contains("break the run up"), "{stderr}");

    // The `whitespace` pre-tokenizer is refused two spaces in a row (llama.cpp asserts).
    let ws = home.path().join("ws.gguf");
    std::fs::write(&ws, with_pre(&base_bytes, "whitespace")).unwrap();
    let two = home.path().join("two-spaces.txt");
    std::fs::write(&two, "x  x").unwrap();
    let (code, signal, stderr) = run(home.path(), &ws, &two);
    assert_eq!((code, signal), (Some(1), None), "{stderr}");
    assert!(
        stderr.contains("two whitespace characters in a row"),
        "{stderr}"
    );

    // The built-in SentencePiece vocabulary takes runs of every class at its own bound:
    // llama.cpp's SPM tokenizer takes time quadratic in a run of byte-fallback characters
    // (`llama::runs::MAX_SPM_RUN`), and one past the bound is refused.
    let spm = common::synth_cli(home.path(), "tiny", 1);
    let at_bound = home.path().join("spm-runs.txt");
    let spm_text: String = [
        ("A", MAX_SPM_RUN),
        ("!", MAX_SPM_RUN),
        ("1", MAX_DIGIT_RUN),
        (" ", MAX_SPACE_RUN),
        ("日", MAX_SPM_RUN),
        ("😀", MAX_SPM_RUN),
        ("é", MAX_SPM_RUN),
    ]
    .iter()
    .map(|(c, n)| c.repeat(*n))
    .collect();
    std::fs::write(&at_bound, categories_and_a_mib_line("", spm_text)).unwrap();
    let outcome = run(home.path(), &spm, &at_bound);
    assert!(survived(&outcome), "SentencePiece: {:?}", outcome);
    let past = home.path().join("spm-past.txt");
    std::fs::write(&past, "日".repeat(MAX_SPM_RUN + 1)).unwrap();
    let (code, signal, stderr) = run(home.path(), &spm, &past);
    assert_eq!((code, signal), (Some(1), None), "{stderr}");
    assert!(stderr.contains("SentencePiece"), "{stderr}");
}
