//! The `tokscope` binary from the outside: help, `run --json`, `synth`, config errors and bad
//! model files, each with its message and exit code, never a panic or a backtrace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::no_panic;
use common::tokscope_cmd as tokscope;

use std::io::Write;
use std::path::Path;

use predicates::prelude::*;

/// The binary, isolated from the real home: its own data and config dirs.
fn write_tiny(home: &Path) -> std::path::PathBuf {
    let path = home.join("tiny.gguf");
    tokscope(home)
        .args(["synth", "--preset", "tiny", "-o"])
        .arg(&path)
        .assert()
        .success()
        .stderr(predicate::str::contains("synthetic weights"));
    path
}

#[test]
fn help_lists_the_commands() {
    let home = tempfile::tempdir().unwrap();
    tokscope(home.path())
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("run").and(predicate::str::contains("synth")));
}

/// `--help` described `doctor` as the tokenizer check only (#59): its line names every check.
#[test]
fn help_names_every_doctor_check() {
    let home = tempfile::tempdir().unwrap();
    let out = common::ok_stdout(tokscope(home.path()).arg("--help"));
    let out = String::from_utf8(out).unwrap();
    // The command's line and its wrapped continuation lines (indented further).
    let mut lines = out.lines().skip_while(|l| !l.starts_with("  doctor "));
    let first = lines.next().unwrap_or_else(|| panic!("{out}"));
    let doctor: String = std::iter::once(first)
        .chain(lines.take_while(|l| l.starts_with("   ")))
        .collect::<Vec<_>>()
        .join(" ");
    for check in ["tokenizer", "template", "scoring", "gpu", "bandwidth"] {
        assert!(doctor.contains(check), "{check} in: {doctor}");
    }
}

#[test]
fn run_json_has_every_metric_and_the_stamp() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = write_tiny(home.path());
    let out = common::ok_stdout(
        tokscope(home.path())
            .args([
                "run", "-p", "Hello", "--temp", "0", "-n", "12", "-t", "1", "--json", "-m",
            ])
            .arg(&model),
    );
    let v: serde_json::Value = serde_json::from_slice(&out).expect("stdout is one JSON object");
    let m = &v["metrics"];
    for key in [
        "ttft_ms",
        "e2e_ms",
        "tpot_ms",
        "decode_tok_per_s",
        "prefill_tok_per_s",
        "template_tokenize_ms",
        "prefill_ms",
        "first_sample_ms",
        "prompt_tokens",
        "cached_tokens",
        "tokens_generated",
    ] {
        assert!(!m[key].is_null(), "metrics.{key} missing in {m}");
    }
    for key in ["mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms"] {
        assert!(m["itl"][key].as_f64().unwrap() >= 0.0, "itl.{key}");
    }
    assert!(m["ttft_ms"].as_f64().unwrap() > 0.0);
    let n = m["tokens_generated"].as_u64().unwrap();
    assert!((1..=12).contains(&n));
    assert_eq!(v["token_ready_ms"].as_array().unwrap().len() as u64, n);
    let stamp = &v["stamp"];
    for key in [
        "tokscope_version",
        "llama_cpp",
        "backend",
        "model_file",
        "model_size_bytes",
        "model_fingerprint",
        "architecture",
        "n_params",
        "quantization",
        "n_ctx",
        "threads",
        "sampling",
    ] {
        assert!(!stamp[key].is_null(), "stamp.{key} missing in {stamp}");
    }
    assert_eq!(stamp["model_file"], "tiny.gguf");
    assert_eq!(stamp["threads"], 1);
    assert_eq!(stamp["sampling"]["temperature"], 0.0);
    assert_eq!(stamp["synthetic"], true);
    assert!(v["warning"].as_str().unwrap().contains("synthetic weights"));
    assert!(v["llama_counters"]["eval_ms"].as_f64().is_some());
    // The roofline, as the chat's pane: a ceiling from some bandwidth and the bytes a token.
    let r = &v["roofline"];
    assert!(r["ceiling_tok_per_s"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["bytes_per_token"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["mbu_pct"].as_f64().unwrap() > 0.0, "{r}");
    // Time to ready: the engine's stages fit inside it, the rest is what is left.
    let l = &v["load"];
    let f = |k: &str| l[k].as_f64().unwrap_or_else(|| panic!("load.{k} in {l}"));
    let stages = f("checks_ms") + f("weights_ms") + f("context_ms");
    assert!(f("weights_ms") > 0.0 && f("context_ms") > 0.0, "{l}");
    assert!(stages <= f("ready_ms"), "{l}");
    assert!((f("ready_ms") - stages - f("other_ms")).abs() < 1e-6, "{l}");
}

#[test]
fn run_reports_the_roofline_against_the_configured_bandwidth() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = write_tiny(home.path());
    std::fs::create_dir_all(home.path().join("config")).unwrap();
    std::fs::write(
        home.path().join("config/config.toml"),
        "bandwidth_gb_s = 10.0\n",
    )
    .unwrap();
    let run = |json: bool| {
        let mut cmd = tokscope(home.path());
        cmd.args([
            "run", "-p", "Hello", "--temp", "0", "-n", "8", "-t", "1", "-m",
        ])
        .arg(&model);
        if json {
            cmd.arg("--json");
        }
        cmd.assert()
            .success()
            .stderr(no_panic())
            .get_output()
            .clone()
    };
    let out = run(true);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["roofline"];
    let bytes = r["bytes_per_token"].as_f64().unwrap();
    assert_eq!(r["bandwidth_bytes_per_s"].as_f64(), Some(10e9), "{r}");
    assert!(
        r["bandwidth_source"].as_str().unwrap().contains("config"),
        "{r}"
    );
    let ceiling = r["ceiling_tok_per_s"].as_f64().unwrap();
    assert!((ceiling - 10e9 / bytes).abs() < 1e-6 * ceiling, "{r}");
    let decode = v["metrics"]["decode_tok_per_s"].as_f64().unwrap();
    let mbu = r["mbu_pct"].as_f64().unwrap();
    assert!(
        (mbu - decode / ceiling * 100.0).abs() < 1e-6 * mbu,
        "{mbu} vs {decode}/{ceiling}"
    );
    // The human summary on stderr says the same.
    let stderr = String::from_utf8(run(false).stderr).unwrap();
    assert!(stderr.contains("roofline ceiling "), "{stderr}");
    assert!(stderr.contains("bandwidth 10.0 GB/s"), "{stderr}");
}

#[test]
fn run_streams_text_and_prints_a_summary() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = write_tiny(home.path());
    tokscope(home.path())
        .args(["run", "-p", "Hi", "--temp", "0", "-n", "8", "-t", "1", "-m"])
        .arg(&model)
        .assert()
        .success()
        .stderr(
            predicate::str::contains("TTFT")
                .and(predicate::str::contains("ITL"))
                .and(predicate::str::contains("synthetic weights")),
        );
}

/// A context whose KV cache would not fit in the memory available is refused before llama.cpp
/// allocates it (and the kernel swaps or kills it): the message names the cache's size, the
/// memory available and what to do, never a panic. A context that fits says its cache's size.
#[test]
fn a_kv_cache_larger_than_the_memory_is_refused_with_what_to_do() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    // The tiny shape has 64 K and 64 V values a layer a cell in f16 (256 bytes): at the
    // largest -c, 16,777,216 cells, enough layers that the cache is twice this machine's
    // available memory.
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let available_kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let layers = (2 * available_kb * 1024).div_ceil(16_777_216 * 256).max(2);
    let big = home.path().join("deep.gguf");
    tokscope(home.path())
        .args(["synth", "--preset", "tiny", "--type", "q8_0", "--layers"])
        .arg(layers.to_string())
        .arg("-o")
        .arg(&big)
        .assert()
        .success();
    tokscope(home.path())
        .args([
            "run", "-p", "hi", "-n", "1", "-t", "1", "-c", "16777216", "-m",
        ])
        .arg(&big)
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("the KV cache of a 16777216-token context would take")
                .and(predicate::str::contains("GB (K f16, V f16), but only"))
                .and(predicate::str::contains(
                    "of memory is available (MemAvailable)",
                ))
                .and(predicate::str::contains("use a smaller context: -c "))
                .and(predicate::str::contains(
                    "--cache-type-k q8_0 --cache-type-v q8_0",
                ))
                .and(no_panic()),
        );
    let model = write_tiny(home.path());
    tokscope(home.path())
        .args(["run", "-p", "hi", "-n", "1", "-t", "1", "-c", "1000", "-m"])
        .arg(&model)
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "note: KV cache 0.52 MB for the 1024-token context (K f16, V f16)",
        ));
}

/// `run --token-lines`: one JSON line per generated token, indexed from 0, as many as the
/// report counts (held-back and empty texts included), and their texts join to the answer.
#[test]
fn run_token_lines_gives_one_line_per_token() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = write_tiny(home.path());
    let report = home.path().join("report.jsonl");
    let out = common::ok_stdout(
        tokscope(home.path())
            .args([
                "run",
                "-p",
                "Hi",
                "--temp",
                "0",
                "-n",
                "24",
                "--ignore-eos",
                "-t",
                "1",
                "--token-lines",
                "--report",
            ])
            .arg(&report)
            .arg("-m")
            .arg(&model),
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let report: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&report)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        lines.len() as u64,
        report["metrics"]["tokens_generated"].as_u64().unwrap()
    );
    assert_eq!(lines.len(), 24);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["index"].as_u64(), Some(i as u64), "{line}");
    }
    let joined: String = lines.iter().map(|l| l["text"].as_str().unwrap()).collect();
    assert_eq!(joined, report["text"].as_str().unwrap());
    // --json and --token-lines both want stdout.
    tokscope(home.path())
        .args(["run", "-p", "Hi", "--json", "--token-lines", "-m"])
        .arg(&model)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--token-lines"));
}

#[test]
fn bad_model_files_give_clear_errors_and_exit_3() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    let tiny = write_tiny(dir);
    let bytes = std::fs::read(&tiny).unwrap();
    let header_len = 64; // inside the metadata
    let cases: Vec<(&str, Option<Vec<u8>>, &str)> = vec![
        ("missing.gguf", None, "not found"),
        ("empty.gguf", Some(vec![]), "empty"),
        (
            "random.gguf",
            Some(
                (0..4096u32)
                    .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                    .collect(),
            ),
            "not a GGUF",
        ),
        (
            "magic.gguf",
            Some(b"GGML\x03\x00\x00\x00rest".to_vec()),
            "not a GGUF",
        ),
        ("header.gguf", Some(bytes[..header_len].to_vec()), "GGUF"),
        (
            "tensors.gguf",
            Some(bytes[..bytes.len() / 2].to_vec()),
            "load",
        ),
    ];
    for (name, content, expect) in cases {
        let path = dir.join(name);
        if let Some(c) = &content {
            std::fs::File::create(&path).unwrap().write_all(c).unwrap();
        }
        tokscope(dir)
            .args(["run", "-p", "hi", "-t", "1", "-m"])
            .arg(&path)
            .assert()
            .code(3)
            .stderr(predicate::str::contains(expect).and(predicate::str::contains("error:")))
            .stderr(predicate::str::contains(name))
            .stderr(no_panic());
    }
    // A directory.
    tokscope(dir)
        .args(["run", "-p", "hi", "-m"])
        .arg(dir)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("directory"))
        .stderr(no_panic());
}

#[test]
fn no_model_says_how_to_get_the_demo_model() {
    let home = tempfile::tempdir().unwrap();
    tokscope(home.path())
        .args(["run", "-p", "hi"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("fetch-demo"))
        .stderr(no_panic());
}

#[test]
fn bad_flags_and_config_name_the_key_and_exit_2() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    tokscope(dir)
        .args(["run", "-p", "hi", "--temp", "-1", "-m", "x.gguf"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("sampling.temperature").and(predicate::str::contains("-1")),
        );
    tokscope(dir)
        .args(["run", "-p", "hi", "--top-p", "2", "-m", "x.gguf"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("sampling.top_p"));
    tokscope(dir).args(["run", "--bogus"]).assert().code(2);

    let cfg = dir.join("bad.toml");
    for (text, expect) in [
        ("n_ctx = 0\n", "n_ctx"),
        ("threads = 0\n", "threads"),
        ("nonsense_key = 1\n", "nonsense_key"),
        ("n_ctx = \"many\"\n", "n_ctx"),
        ("[sampling\n", "bad.toml"),
    ] {
        std::fs::write(&cfg, text).unwrap();
        tokscope(dir)
            .args(["run", "-p", "hi", "--config"])
            .arg(&cfg)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(expect).and(predicate::str::contains("bad.toml")))
            .stderr(no_panic());
    }
    tokscope(dir)
        .args(["run", "-p", "hi", "--config"])
        .arg(dir.join("nope.toml"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nope.toml"));
}

#[test]
fn config_path_honours_the_platform_dir_and_override() {
    let home = tempfile::tempdir().unwrap();
    tokscope(home.path())
        .args(["config", "path"])
        .assert()
        .success()
        .stdout(predicate::str::contains("config").and(predicate::str::contains("config.toml")));
    std::fs::create_dir_all(home.path().join("config")).unwrap();
    std::fs::write(home.path().join("config/config.toml"), "n_ctx = 777\n").unwrap();
    tokscope(home.path())
        .args(["config", "show"])
        .assert()
        .success()
        .stdout(predicate::str::contains("n_ctx = 777"));
}

/// A copy of a GGUF's metadata with `edit` applied, and no tensors.
fn metadata_only(
    from: &Path,
    to: &Path,
    edit: impl Fn(&str, tokscope::gguf::GgufValue) -> Option<(String, tokscope::gguf::GgufValue)>,
) {
    let header = tokscope::gguf::read_metadata(from).unwrap();
    let mut w = tokscope::gguf::GgufWriter::new();
    for (k, v) in header.metadata {
        if k == "general.alignment" {
            continue;
        }
        if let Some((k, v)) = edit(&k, v) {
            w.add_kv(&k, v).unwrap();
        }
    }
    w.write_file(to, &mut |_| {}).unwrap();
}

#[test]
fn unsupported_architecture_and_vocabulary_only_files_are_clear_errors() {
    use tokscope::gguf::GgufValue;
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    let tiny = write_tiny(dir);
    let arch = dir.join("arch.gguf");
    metadata_only(&tiny, &arch, |k, v| {
        let k = k.replacen("llama.", "qwerty9.", 1);
        if k == "general.architecture" {
            Some((k, GgufValue::String("qwerty9".into())))
        } else {
            Some((k, v))
        }
    });
    tokscope(dir)
        .args(["run", "-p", "hi", "-t", "1", "-m"])
        .arg(&arch)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("could not load").and(predicate::str::contains("qwerty9")))
        .stderr(no_panic());
    let vocab_only = dir.join("vocab.gguf");
    metadata_only(&tiny, &vocab_only, |k, v| Some((k.to_string(), v)));
    tokscope(dir)
        .args(["run", "-p", "hi", "-t", "1", "-m"])
        .arg(&vocab_only)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("could not load"))
        .stderr(no_panic());
    // Truncated inside the fixed header (magic, version, counts).
    let short = dir.join("short.gguf");
    std::fs::write(&short, &std::fs::read(&tiny).unwrap()[..10]).unwrap();
    tokscope(dir)
        .args(["run", "-p", "hi", "-m"])
        .arg(&short)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("header is damaged"))
        .stderr(no_panic());
}

/// `--template completion` on a model with a chat template of its own gave an empty answer
/// with no hint (#59): the template's note says what happens and what to do.
#[test]
fn completion_on_a_chat_model_says_so() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let tiny = write_tiny(home.path());
    tokscope(home.path())
        .args([
            "run",
            "-p",
            "hi",
            "-t",
            "1",
            "-n",
            "2",
            "--template",
            "completion",
            "-m",
        ])
        .arg(&tiny)
        .assert()
        .success()
        .stderr(predicate::str::contains("has a chat template of its own"))
        .stderr(predicate::str::contains("leave out --template"));
}

#[test]
fn a_chat_template_llama_cpp_cannot_apply_falls_back_or_fails_clearly() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    let tiny = write_tiny(dir);
    // Same length, so the file stays valid: a template llama.cpp recognises as nothing.
    let mut bytes = std::fs::read(&tiny).unwrap();
    let marker = b"{% set loop_messages = messages %}";
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("the Llama 3 template is in the file");
    let header = tokscope::gguf::read_metadata(&tiny).unwrap();
    let len = header
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str())
        .unwrap()
        .len();
    for b in &mut bytes[at..at + len] {
        *b = b'x';
    }
    let odd = dir.join("odd-template.gguf");
    std::fs::write(&odd, bytes).unwrap();
    tokscope(dir)
        .args(["run", "-p", "hi", "-t", "1", "-n", "4", "-m"])
        .arg(&odd)
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "the model's chat template cannot be rendered (the template leaves the user's message out of the prompt)",
        ))
        .stderr(predicate::str::contains("completion"));
    tokscope(dir)
        .args([
            "run",
            "-p",
            "hi",
            "-t",
            "1",
            "-n",
            "4",
            "--template",
            "model",
            "-m",
        ])
        .arg(&odd)
        .assert()
        .code(1)
        .stderr(
            predicate::str::contains("chat template").and(predicate::str::contains("--template")),
        )
        .stderr(no_panic());
    tokscope(dir)
        .args([
            "run",
            "-p",
            "hi",
            "-t",
            "1",
            "-n",
            "4",
            "--template",
            "nosuchtemplate",
            "-m",
        ])
        .arg(&odd)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("nosuchtemplate"))
        .stderr(no_panic());
}

/// Run the binary as the unprivileged user `nobody` (tests run as root, for whom permission
/// bits do not stop reads), with home dirs it can write.
fn as_nobody(dir: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new("runuser");
    cmd.args(["-u", "nobody", "--", env!("CARGO_BIN_EXE_tokscope")])
        .env("TOKSCOPE_DATA_DIR", dir.join("nobody-data"))
        .env("TOKSCOPE_CONFIG_DIR", dir.join("nobody-config"))
        .env_remove("TOKSCOPE_MODEL");
    cmd
}

#[test]
fn unreadable_model_and_config_files_are_clear_errors() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let model = write_tiny(dir);
    std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o000)).unwrap();
    let out = as_nobody(dir)
        .args(["run", "-p", "hi", "-m"])
        .arg(&model)
        .output()
        .expect("runuser is part of util-linux");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("cannot read model file") && stderr.contains("permission"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let config = dir.join("secret.toml");
    std::fs::write(&config, "n_ctx = 512\n").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o000)).unwrap();
    let out = as_nobody(dir)
        .args(["run", "-p", "hi", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot read config file") && stderr.contains("secret.toml"),
        "{stderr}"
    );
}

/// Environment values that used to create folders where they should not, or blame the model:
/// each is refused before anything is created, naming the variable and what to do.
#[test]
fn bad_environment_values_are_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing_home = dir.path().join("no-such-home");
    tokscope(dir.path())
        .env("HOME", &missing_home)
        .env_remove("TOKSCOPE_DATA_DIR")
        // The data dir must come from HOME for this case (an XDG_DATA_HOME elsewhere is fine).
        .env_remove("XDG_DATA_HOME")
        .args(["results"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("HOME=")
                .and(predicate::str::contains("is not an existing folder"))
                .and(no_panic()),
        );
    assert!(!missing_home.exists(), "HOME was created");
    // With the data dir given, a missing HOME (a system user's /nonexistent) is fine, and the
    // cache goes with the data instead of creating HOME.
    tokscope(dir.path())
        .env("HOME", &missing_home)
        .env_remove("TOKSCOPE_CACHE_DIR")
        .args(["results"])
        .assert()
        .success();
    assert!(!missing_home.exists(), "HOME was created");

    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    tokscope(dir.path())
        .current_dir(&work)
        .env("TOKSCOPE_DATA_DIR", "relative/dir")
        .args(["results"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "TOKSCOPE_DATA_DIR=relative/dir is a relative path",
        ));
    assert!(
        !work.join("relative").exists(),
        "a relative data dir was created"
    );

    for bad in ["0", "soon", "-5"] {
        tokscope(dir.path())
            .env("TOKSCOPE_PROBE_TIMEOUT_S", bad)
            .args(["results"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!(
                "TOKSCOPE_PROBE_TIMEOUT_S={bad} is not a number of seconds"
            )));
    }
}

#[test]
fn run_confidence_gives_one_value_per_token_and_none_unasked() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = write_tiny(home.path());
    let run = |extra: &[&str]| {
        let out = common::ok_stdout(
            tokscope(home.path())
                .args([
                    "run", "-p", "Hello", "--temp", "0", "-n", "12", "-t", "1", "--json", "-m",
                ])
                .arg(&model)
                .args(extra),
        );
        serde_json::from_slice::<serde_json::Value>(&out).expect("stdout is one JSON object")
    };
    assert!(
        run(&["--sampling", "host"]).get("confidence").is_none(),
        "not asked: none"
    );
    let v = run(&["--confidence", "--sampling", "host"]);
    let c = &v["confidence"];
    let n = v["metrics"]["tokens_generated"].as_u64().unwrap() as usize;
    let p: Vec<f64> = c["p"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let h = c["entropy"].as_array().unwrap();
    assert!(n > 0 && p.len() == n && h.len() == n, "{c}");
    assert_greedy_confidence(&v, n);
    assert_eq!(c["summary"]["tokens"].as_u64(), Some(n as u64));
    // Under speculation (a draft of the same file, so drafts are accepted and tokens come
    // from verify passes' rows): the same greedy answer, one figure per token, each from the
    // row that chose it.
    let spec = run(&[
        "--confidence",
        "--sampling",
        "host",
        "--draft",
        model.to_str().unwrap(),
    ]);
    assert_eq!(
        spec["text"], v["text"],
        "greedy with a draft: the same answer"
    );
    assert!(
        spec["spec"]["accepted"].as_u64().unwrap_or(0) > 0,
        "drafts were accepted: {}",
        spec["spec"]
    );
    assert_greedy_confidence(&spec, n);
    // Sampling on the backend leaves no logits on the host: said, never invented.
    let backend = run(&["--confidence", "--sampling", "backend"]);
    let b = &backend["confidence"];
    assert!(
        b["unavailable"].as_str().unwrap().contains("backend"),
        "{b}"
    );
    assert!(b["p"].as_array().unwrap().is_empty() && b["summary"].is_null());
}

/// A greedy answer's own confidence: `n` figures, each chosen token the most likely of its
/// row's top tokens, with the top's probability; the tokens' texts make the answer's text.
fn assert_greedy_confidence(v: &serde_json::Value, n: usize) {
    let c = &v["confidence"];
    let arr = |k: &str| {
        c[k].as_array()
            .unwrap_or_else(|| panic!("{k}: {c}"))
            .clone()
    };
    let (p, token, text, top) = (arr("p"), arr("token"), arr("text"), arr("top"));
    assert!(
        [p.len(), token.len(), text.len(), top.len()] == [n; 4],
        "{n} tokens: {c}"
    );
    for i in 0..n {
        let row = top[i].as_array().unwrap();
        assert_eq!(row.len(), 5, "top 5 at {i}");
        assert_eq!(
            row[0]["token"], token[i],
            "greedy: the chosen token is the top at {i}"
        );
        let (p_top, p_i) = (row[0]["p"].as_f64().unwrap(), p[i].as_f64().unwrap());
        assert!(
            (p_top - p_i).abs() < 1e-6 && p_i > 0.0 && p_i <= 1.0,
            "{p_top} vs {p_i}"
        );
        let ps: Vec<f64> = row.iter().map(|t| t["p"].as_f64().unwrap()).collect();
        assert!(
            ps.windows(2).all(|w| w[0] >= w[1]),
            "descending at {i}: {ps:?}"
        );
        assert!(ps.iter().sum::<f64>() <= 1.0 + 1e-6);
    }
    let joined: String = text.iter().map(|t| t.as_str().unwrap()).collect();
    if !joined.contains('\u{FFFD}') {
        assert_eq!(joined, v["text"].as_str().unwrap(), "the tokens' texts");
    }
}
