//! The details a daily user trips on, from the outside: the bare command takes the chat's
//! flags, `run` reads its prompt from a file or stdin, and a closed pipe ends it quietly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;

fn tokscope(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("tokscope").unwrap();
    cmd.env("TOKSCOPE_DATA_DIR", home.join("data"))
        .env("TOKSCOPE_CONFIG_DIR", home.join("config"))
        .env_remove("TOKSCOPE_MODEL")
        .env_remove("RUST_BACKTRACE");
    cmd
}

fn tiny(dir: &Path) -> PathBuf {
    common::synth(
        dir,
        "tiny.gguf",
        "tiny",
        tokscope::synth::TensorType::F32,
        1,
    )
}

#[test]
fn the_bare_command_takes_the_chat_flags() {
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    // Not a terminal, so the chat refuses to start; but it got as far as that: -m was taken.
    tokscope(home.path())
        .arg("-m")
        .arg(&model)
        .args(["--temp", "0.5"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("the chat needs a terminal"))
        .stderr(predicate::str::contains("unexpected argument").not());
    // Chat flags with a subcommand are an error, not ignored.
    tokscope(home.path())
        .arg("-m")
        .arg(&model)
        .arg("history")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("the chat's flags"));
    // The global --config before a command still works.
    std::fs::write(home.path().join("c.toml"), "n_ctx = 512\n").unwrap();
    tokscope(home.path())
        .arg("--config")
        .arg(home.path().join("c.toml"))
        .args(["config", "path"])
        .assert()
        .success();
}

#[test]
fn run_reads_the_prompt_from_a_file_or_stdin() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let prompt = home.path().join("prompt.txt");
    // The same prompt four ways must give the same answer (greedy) from the same tokens.
    std::fs::write(&prompt, "Why is the sky blue?\n").unwrap();
    let json = |out: &[u8]| -> serde_json::Value { serde_json::from_slice(out).unwrap() };
    let base = ["run", "--json", "--temp", "0", "-n", "4", "-t", "1", "-m"];
    let from_arg = tokscope(home.path())
        .args(base)
        .arg(&model)
        .args(["-p", "Why is the sky blue?\n"])
        .output()
        .unwrap();
    assert!(from_arg.status.success());
    let from_file = tokscope(home.path())
        .args(base)
        .arg(&model)
        .arg("-f")
        .arg(&prompt)
        .output()
        .unwrap();
    assert!(from_file.status.success(), "{from_file:?}");
    let from_dash = tokscope(home.path())
        .args(base)
        .arg(&model)
        .args(["-p", "-"])
        .write_stdin("Why is the sky blue?\n")
        .output()
        .unwrap();
    assert!(from_dash.status.success(), "{from_dash:?}");
    let piped = tokscope(home.path())
        .args(base)
        .arg(&model)
        .write_stdin("Why is the sky blue?\n")
        .output()
        .unwrap();
    assert!(piped.status.success(), "{piped:?}");
    let reference = json(&from_arg.stdout);
    for out in [&from_file, &from_dash, &piped] {
        let v = json(&out.stdout);
        assert_eq!(v["text"], reference["text"]);
        assert_eq!(
            v["metrics"]["prompt_tokens"],
            reference["metrics"]["prompt_tokens"]
        );
    }
    // A missing file, and an empty stdin, are clear errors.
    tokscope(home.path())
        .args(base)
        .arg(&model)
        .args(["-f", "/nonexistent/prompt.txt"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("could not read the prompt file"));
    tokscope(home.path())
        .args(base)
        .arg(&model)
        .write_stdin("")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("the prompt is empty"));
}

#[test]
fn run_into_a_closed_pipe_ends_quietly() {
    let _lock = common::model_lock();
    let home = tempfile::tempdir().unwrap();
    let model = tiny(home.path());
    let script = format!(
        "{} run -m {} -p hi -n 400 --ignore-eos -t 1 --temp 1 | head -c 1 >/dev/null; echo \"exit=${{PIPESTATUS[0]}}\"",
        env!("CARGO_BIN_EXE_tokscope"),
        model.display()
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("TOKSCOPE_DATA_DIR", home.path().join("data"))
        .env("TOKSCOPE_CONFIG_DIR", home.path().join("config"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("exit=0"), "{stdout}\n{stderr}");
    for bad in ["panicked", "crashed", "Broken pipe", "error:"] {
        assert!(!stderr.contains(bad), "{bad}: {stderr}");
    }
}
