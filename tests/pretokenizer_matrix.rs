//! No typed or pasted text ends the process, whatever the model's pre-tokenizer: every
//! pre-tokenizer the linked llama.cpp ships (read from its `llama-vocab.cpp`), on a BPE model
//! with Llama 3's vocabulary, is handed long runs (`MAX_RUN`; digits `MAX_DIGIT_RUN`,
//! whitespace `MAX_SPACE_RUN`, the bounds of `llama::runs`) of every class (letters,
//! punctuation, digits, spaces, CJK, emoji) through the real binary's engine thread; and a
//! text past `MAX_CHARS` is refused with the message, never tokenized. The built-in
//! SentencePiece vocabulary gets shorter runs (its tokenizer is quadratic in byte-fallback
//! runs). (llama.cpp's regex pre-tokenizers recurse once per character of a match: before the
//! stack was sized for it, 6,400 'A' crashed deepseek-llm.) The same text then holds a run of a character of
//! every Unicode general category (and the sequences that combine them: combining marks piled
//! on one letter, ZWJ emoji, flags, bidi controls, private use, unassigned code points) and is
//! padded with mixed words to one line of 1 MiB.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use crate::common;
use tokscope::gguf::GgufValue;
use tokscope::llama::runs::{MAX_CHARS, MAX_DIGIT_RUN, MAX_SPACE_RUN};

/// The runs of one class the SentencePiece vocabulary is handed: a run of characters it spells
/// as bytes takes it time quadratic in the run (`runs::spm_copies`).
const SPM_RUN: usize = 3_000;

/// The runs of one class the end-to-end matrix hands every pre-tokenizer (the bound the
/// class-run guard had before issue 57; the stack now takes runs up to `MAX_CHARS`).
const MAX_RUN: usize = 50_000;

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

/// A one-layer model with Llama 3's vocabulary (its pre-tokenizer replaced by [`with_pre`]).
fn llama3_base(home: &Path) -> PathBuf {
    let base = home.join("bpe.gguf");
    common::tokscope_cmd(home)
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
    base
}

#[test]
fn every_pre_tokenizer_takes_the_longest_runs_handed_to_it() {
    // It keeps both cores busy for a minute: hold the model lock, so that no test that
    // times llama.cpp (the profiler's physics, run vs llama-bench) shares the CPU with it.
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let base = llama3_base(home.path());
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

    // Issue 57's texts, which crashed bloom's and deepseek-llm's pre-tokenizers (exit 139)
    // under the class-run guard, are tokenized; a text past `MAX_CHARS` is refused by its
    // length, before llama.cpp sees it.
    let mut g = Gen(57);
    let b64: Vec<&str> = ["Q", "z", "0", "9", "+", "/", "x", "K"].to_vec();
    let base64: String = (0..300_000).map(|_| g.pick(&b64)).collect();
    for pre in ["bloom", "deepseek-llm"] {
        let model = home.path().join(format!("issue57-{pre}.gguf"));
        std::fs::write(&model, with_pre(&base_bytes, pre)).unwrap();
        for (what, text) in [
            ("a1", "a1".repeat(150_000)),
            ("base64", base64.clone()),
            ("deva", "क०".repeat(150_000)),
        ] {
            let path = home.path().join(format!("issue57-{what}.txt"));
            std::fs::write(&path, text).unwrap();
            let outcome = run(home.path(), &model, &path);
            assert!(survived(&outcome), "{pre} {what}: {outcome:?}");
        }
    }
    let deepseek = home.path().join("deepseek.gguf");
    std::fs::write(&deepseek, with_pre(&base_bytes, "deepseek-llm")).unwrap();
    let header = tokscope::gguf::read_metadata(&deepseek).unwrap();
    assert_eq!(
        header.get("tokenizer.ggml.pre"),
        Some(&GgufValue::String("deepseek-llm".into()))
    );
    let past = home.path().join("past-bound.txt");
    std::fs::write(&past, "a1".repeat(MAX_CHARS / 2 + 1)).unwrap();
    let (code, signal, stderr) = run(home.path(), &deepseek, &past);
    assert_eq!((code, signal), (Some(1), None), "{stderr}");
    assert!(
        stderr.contains(&format!("{} characters", MAX_CHARS + 2)),
        "{stderr}"
    );
    assert!(stderr.contains("in parts"), "{stderr}");

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

    // The built-in SentencePiece vocabulary takes runs of every class: llama.cpp's SPM
    // tokenizer takes time quadratic in a run of characters it spells as bytes
    // (`llama::runs::spm_copies`), and a text that would take it seconds is refused.
    let spm = common::synth_cli(home.path(), "tiny", 1);
    let at_bound = home.path().join("spm-runs.txt");
    let spm_text: String = [
        ("A", SPM_RUN),
        ("!", SPM_RUN),
        ("1", MAX_DIGIT_RUN),
        (" ", MAX_SPACE_RUN),
        ("日", SPM_RUN),
        ("😀", SPM_RUN),
        ("é", SPM_RUN),
    ]
    .iter()
    .map(|(c, n)| c.repeat(*n))
    .collect();
    std::fs::write(&at_bound, categories_and_a_mib_line("", spm_text)).unwrap();
    let outcome = run(home.path(), &spm, &at_bound);
    assert!(survived(&outcome), "SentencePiece: {:?}", outcome);
    let past = home.path().join("spm-past.txt");
    std::fs::write(&past, "日১".repeat(50_000)).unwrap();
    let (code, signal, stderr) = run(home.path(), &spm, &past);
    assert_eq!((code, signal), (Some(1), None), "{stderr}");
    assert!(
        stderr.contains("SentencePiece vocabulary spells 100000"),
        "{stderr}"
    );
}

// ---------------------------------------------------------------------------------------------
// The tokenizer stack, by design (issue 57): llama.cpp's regex pre-tokenizers recurse once per
// character of a match, whatever the characters' classes ("a1" × 150,000 crashed bloom's), so
// every thread that tokenizes outside text has a stack sized for the longest text handed to it
// (`runs::TOKENIZER_STACK_BYTES` for `runs::MAX_CHARS`). The child below tokenizes on a stack
// `SCALE` times smaller than that, texts `SCALE` times shorter than the bound: the depth is
// linear in the match, so what survives at scale survives at full size, in a fraction of the
// time (the full size, 8 Mi characters per text, takes minutes per pre-tokenizer).

/// Set in a child run of this test binary: the job file it works through.
const CHILD: &str = "TOKSCOPE_TOKENIZE_CHILD";

/// How much smaller the child's stack and its longest texts are than the real ones.
const SCALE: usize = 2048;

/// This binary's name for `tokenize_child`, for a child run of it.
fn child_test_name() -> String {
    let module = module_path!();
    let module = module.split_once("::").map_or(module, |(_, rest)| rest);
    format!("{module}::tokenize_child")
}

/// A seeded generator (xorshift), so that every run tokenizes the same texts.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// The generated texts, `chars` characters each (about): (name, text).
fn generated(chars: usize, seed: u64) -> Vec<(String, String)> {
    let mut g = Gen(seed | 1);
    let repeat = |unit: &str| unit.repeat(chars / unit.chars().count());
    let b64: Vec<String> = (b'A'..=b'Z')
        .chain(b'a'..=b'z')
        .chain(b'0'..=b'9')
        .chain([b'+', b'/'])
        .map(|b| (b as char).to_string())
        .collect();
    let b64: Vec<&str> = b64.iter().map(String::as_str).collect();
    let base64: String = (0..chars).map(|_| g.pick(&b64)).collect::<String>() + "==";
    let scripts = [
        "a",
        "Z",
        "é",
        "ж",
        "Ж",
        "日",
        "本",
        "한",
        "ا",
        "ש",
        "क",
        "०",
        "৩",
        "1",
        "٣",
        "!",
        "—",
        "€",
        "😀",
        "👩\u{200D}💻",
        "\u{301}",
        "\u{200B}",
        "_",
        "'",
        "s",
        "ก",
    ];
    let mixed: String = (0..chars).map(|_| g.pick(&scripts)).collect();
    let bytes: Vec<u8> = (0..chars).map(|_| g.next() as u8).collect();
    let random = String::from_utf8_lossy(&bytes).into_owned();
    vec![
        ("A-run".into(), repeat("A")),
        ("!-run".into(), repeat("!")),
        ("a1".into(), repeat("a1")),
        ("क०".into(), repeat("क०")),
        ("日১".into(), repeat("日১")),
        ("base64".into(), base64),
        ("mixed-scripts".into(), mixed),
        ("random-bytes".into(), random),
        // Two messages' worth joined by a line break: one match never spans it.
        (
            "a1-newline-a1".into(),
            format!("{}\n{}", repeat("a1"), repeat("a1")),
        ),
    ]
}

/// The child: for each job line `model \t stack \t text-file`, tokenizes the text with the
/// model's vocabulary as tokscope does (`runs::tokenize_checked`) and unsplit, straight
/// through llama.cpp on a thread of `stack` bytes, and prints the two token digests (or that
/// tokscope refused the text). It says which text it starts on stderr first, so that a crash
/// names it.
#[test]
fn tokenize_child() {
    use llama_cpp_2::model::params::LlamaModelParams;
    use llama_cpp_2::model::LlamaModel;
    use std::hash::{Hash, Hasher};
    use std::io::Write;
    let Some(job) = std::env::var_os(CHILD) else {
        return;
    };
    let backend = tokscope::llama::backend().unwrap();
    let mut loaded: Option<(String, LlamaModel)> = None;
    for line in std::fs::read_to_string(job).unwrap().lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let [model_path, stack, text_path] = fields[..3] else {
            panic!("bad job line {line:?}")
        };
        // `raw`: only the unsplit tokenization (a measurement).
        let raw = fields.get(3) == Some(&"raw");
        if loaded.as_ref().is_none_or(|(p, _)| p != model_path) {
            let params = LlamaModelParams::default().with_vocab_only(true);
            let model = LlamaModel::load_from_file(backend, model_path, &params).unwrap();
            loaded = Some((model_path.to_string(), model));
        }
        let model = &loaded.as_ref().unwrap().1;
        let model_name = Path::new(model_path).file_name().unwrap().to_string_lossy();
        let text = std::fs::read_to_string(text_path).unwrap();
        eprintln!("START {text_path}");
        std::io::stderr().flush().unwrap();
        let digest = |tokens: &[llama_cpp_2::token::LlamaToken]| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            tokens.iter().map(|t| t.0).collect::<Vec<_>>().hash(&mut h);
            format!("{}:{:016x}", tokens.len(), h.finish())
        };
        let started = std::time::Instant::now();
        let ours = if raw {
            Ok(Vec::new())
        } else {
            tokscope::llama::runs::tokenize_checked(model, &text, false, false)
        };
        let ours_s = started.elapsed().as_secs_f64();
        let ours = match ours {
            Ok(tokens) => digest(&tokens),
            Err(e) => {
                println!(
                    "RESULT {model_name} {text_path} refused {ours_s:.3} {}",
                    e.to_string().replace('\n', " ")
                );
                continue;
            }
        };
        let stack: usize = stack.parse().unwrap();
        let started = std::time::Instant::now();
        let unsplit = std::thread::scope(|s| {
            std::thread::Builder::new()
                .stack_size(stack)
                .spawn_scoped(s, || model.vocab().tokenize(text.as_bytes(), false, false))
                .unwrap()
                .join()
                .unwrap()
        });
        let unsplit_s = started.elapsed().as_secs_f64();
        println!(
            "RESULT {model_name} {text_path} {ours} {} {ours_s:.3} {unsplit_s:.3}",
            digest(&unsplit)
        );
    }
}

/// Runs `jobs` (model, stack, text) in a child of this test binary: (status, stdout, stderr).
fn tokenize_children(
    dir: &Path,
    jobs: &[(PathBuf, usize, PathBuf)],
    raw: bool,
) -> (std::process::ExitStatus, String, String) {
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let job = dir.join(format!("job-{}-{}.txt", name(&jobs[0].0), name(&jobs[0].2)));
    let lines: Vec<String> = jobs
        .iter()
        .map(|(m, s, t)| {
            let raw = if raw { "\traw" } else { "" };
            format!("{}\t{s}\t{}{raw}", m.display(), t.display())
        })
        .collect();
    std::fs::write(&job, lines.join("\n")).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            &child_test_name(),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &job)
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Where llama.cpp's tokenizer crashes on a stack of `stack` bytes, for every pre-tokenizer
/// (or those in `TOKSCOPE_MEASURE_PRES`, comma-separated) and generated text: the shortest
/// crashing length found by bisection, and the stack bytes per character that makes. The
/// measurement behind `runs::STACK_BYTES_PER_CHAR`:
/// `cargo test --release --locked --test cli_tests measure_stack -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement (minutes): run by hand, see docs/safety.md"]
fn measure_stack_bytes_per_char() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let base_bytes = std::fs::read(llama3_base(home.path())).unwrap();
    let stack: usize = 4 << 20;
    let names: Vec<String> = match std::env::var("TOKSCOPE_MEASURE_PRES") {
        Ok(list) => list.split(',').map(str::to_string).collect(),
        Err(_) => shipped_pre_tokenizers(),
    };
    let gens = ["A-run", "!-run", "a1", "क०", "base64", "mixed-scripts"];
    let survives = |model: &Path, gen: &str, chars: usize| {
        let (_, text) = generated(chars, 7)
            .into_iter()
            .find(|(n, _)| n == gen)
            .unwrap();
        let path = home.path().join(format!(
            "m-{}-{gen}-{chars}.txt",
            model.file_name().unwrap().to_string_lossy()
        ));
        std::fs::write(&path, text).unwrap();
        let (status, _, _) = tokenize_children(
            home.path(),
            &[(model.to_path_buf(), stack, path.clone())],
            true,
        );
        std::fs::remove_file(&path).unwrap();
        status.success()
    };
    let one = |name: &String| -> Vec<String> {
        let model = home.path().join(format!("pre-{name}.gguf"));
        std::fs::write(&model, with_pre(&base_bytes, name)).unwrap();
        let mut lines = Vec::new();
        for gen in gens {
            // The longest surviving and the shortest crashing length.
            let (mut lo, mut hi) = (0usize, 4_000usize);
            while hi <= 1 << 20 && survives(&model, gen, hi) {
                lo = hi;
                hi *= 2;
            }
            if hi > 1 << 20 {
                lines.push(format!(
                    "{name:>16} {gen:>14}: no crash up to {lo} characters"
                ));
                continue;
            }
            while hi - lo > hi / 50 {
                let mid = (lo + hi) / 2;
                if survives(&model, gen, mid) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            lines.push(format!(
                "{name:>16} {gen:>14}: crashes at {hi} characters: {} stack bytes a character",
                stack / hi
            ));
        }
        eprintln!("{}", lines.join("\n"));
        lines
    };
    let all: Vec<String> = std::thread::scope(|scope| {
        let even: Vec<&String> = names.iter().step_by(2).collect();
        let odd: Vec<&String> = names.iter().skip(1).step_by(2).collect();
        let a = scope.spawn(|| even.into_iter().flat_map(one).collect::<Vec<_>>());
        let b = scope.spawn(|| odd.into_iter().flat_map(one).collect::<Vec<_>>());
        let mut all = a.join().unwrap();
        all.extend(b.join().unwrap());
        all
    });
    let worst = all
        .iter()
        .filter_map(|l| {
            l.split(": ")
                .nth(2)?
                .split(' ')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .max();
    eprintln!("stack {stack} bytes; worst: {worst:?} bytes a character");
}

/// Issue 57: every pre-tokenizer llama.cpp ships (and the SentencePiece vocabulary) takes
/// every generated text (long runs of one class, alternating classes, mixed scripts, base64,
/// random bytes read as UTF-8, two lines of "a1") at 1,000 characters and at `MAX_CHARS /
/// SCALE`, unsplit, on a stack `SCALE` times smaller than the tokenizer threads': no crash,
/// and tokscope's tokenization (`runs::tokenize_checked`) gives the same tokens.
#[test]
fn every_pre_tokenizer_takes_generated_text_to_the_bound_on_a_scaled_stack() {
    use tokscope::llama::runs::{MAX_CHARS, TOKENIZER_STACK_BYTES};
    let _lock = common::model_lock();
    let started = std::time::Instant::now();
    let home = tempfile::tempdir().unwrap();
    let base_bytes = std::fs::read(llama3_base(home.path())).unwrap();
    let mut models = vec![common::synth_cli(home.path(), "tiny", 1)];
    for name in shipped_pre_tokenizers() {
        let model = home.path().join(format!("pre-{name}.gguf"));
        std::fs::write(&model, with_pre(&base_bytes, &name)).unwrap();
        models.push(model);
    }
    let stack = TOKENIZER_STACK_BYTES / SCALE;
    let mut texts = Vec::new();
    for (chars, seed) in [(1_000, 1), (MAX_CHARS / SCALE, 2)] {
        for (name, text) in generated(chars, seed) {
            let path = home.path().join(format!("text-{name}-{chars}.txt"));
            std::fs::write(&path, text).unwrap();
            texts.push(path);
        }
    }
    let half = |models: Vec<&PathBuf>| {
        let jobs: Vec<(PathBuf, usize, PathBuf)> = models
            .into_iter()
            .flat_map(|m| texts.iter().map(|t| (m.clone(), stack, t.clone())))
            .collect();
        let (status, stdout, stderr) = tokenize_children(home.path(), &jobs, false);
        (jobs.len(), status, stdout, stderr)
    };
    let halves = std::thread::scope(|scope| {
        let a = scope.spawn(|| half(models.iter().step_by(2).collect()));
        let b = scope.spawn(|| half(models.iter().skip(1).step_by(2).collect()));
        [a.join().unwrap(), b.join().unwrap()]
    });
    let mut failures = Vec::new();
    let mut slowest = (0.0f64, String::new());
    for (jobs, status, stdout, stderr) in halves {
        if !status.success() {
            let at = stderr
                .lines()
                .rev()
                .find(|l| l.starts_with("START"))
                .unwrap_or("");
            failures.push(format!("the child ended ({status}) at {at}"));
        }
        // (The first line may follow libtest's "test … " on the same line.)
        let results: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.find("RESULT ").map(|at| &l[at..]))
            .collect();
        if results.len() != jobs {
            failures.push(format!("{} of {jobs} texts tokenized", results.len()));
        }
        for line in results {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields[..] {
                // Two whitespace characters in a row (random bytes): llama.cpp would abort.
                [_, "pre-whitespace.gguf", _, "refused", ..] => {}
                // Seconds of SentencePiece byte spelling (`runs::spm_copies`).
                [_, "tiny-1.gguf", _, "refused", ..] if line.contains("spells") => {}
                [_, model, path, ours, unsplit, ours_s, unsplit_s] => {
                    let path = format!("{model} {path}");
                    if ours != unsplit {
                        failures.push(format!("{path}: tokscope {ours}, unsplit {unsplit}"));
                    }
                    let s: f64 = ours_s.parse::<f64>().unwrap() + unsplit_s.parse::<f64>().unwrap();
                    if s > slowest.0 {
                        slowest = (s, path);
                    }
                }
                _ => failures.push(format!("unexpected: {line}")),
            }
        }
    }
    eprintln!(
        "{} models, {} texts each, stack {} bytes: {:?}, slowest text {:.2} s ({})",
        models.len(),
        texts.len(),
        stack,
        started.elapsed(),
        slowest.0,
        slowest.1
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// llama.cpp's SentencePiece tokenizer on the tiny vocabulary, over texts of characters it
/// spells as bytes side by side ("日১" alternating) and apart ("日 " alternating), at growing
/// lengths: the time, the copies `runs::spm_copies` counts, and what `runs::check` says. The
/// measurement behind `runs::MAX_SPM_COPIES`:
/// `cargo test --release --locked --test cli_tests measure_spm -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement (a minute): run by hand, see docs/safety.md"]
fn measure_spm_time() {
    use llama_cpp_2::model::params::LlamaModelParams;
    use llama_cpp_2::model::LlamaModel;
    use tokscope::llama::runs::{check, spm_copies, TokenizerKind};
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let path = common::synth_cli(home.path(), "tiny", 1);
    let backend = tokscope::llama::backend().unwrap();
    let params = LlamaModelParams::default().with_vocab_only(true);
    let model = LlamaModel::load_from_file(backend, &path, &params).unwrap();
    let kind = TokenizerKind::of(&model);
    let chars = kind.spm.clone().expect("a SentencePiece vocabulary");
    for unit in ["日১", "日 ", "ab"] {
        for n in [10_000usize, 20_000, 30_000, 50_000, 100_000] {
            let text = unit.repeat(n / 2);
            let copies = spm_copies(&text, &chars);
            let checked = std::time::Instant::now();
            let verdict = check(&text, &kind).map_or("refused", |()| "taken");
            let checked = checked.elapsed();
            let started = std::time::Instant::now();
            let tokens = model.vocab().tokenize(text.as_bytes(), false, false).len();
            let took = started.elapsed().as_secs_f64();
            eprintln!(
                "{unit:?} × {}: {n} characters, {tokens} tokens, {took:.3} s, {copies} copies \
                 ({:.0} M copies/s), check {verdict} in {checked:?}",
                n / 2,
                copies as f64 / took / 1e6
            );
        }
    }
}
