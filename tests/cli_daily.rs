//! The details a daily user trips on, from the outside: the bare command takes the chat's
//! flags, `run` reads its prompt from a file or stdin, and a closed pipe ends it quietly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::tiny;
use common::tokscope_cmd as tokscope;

use predicates::prelude::*;

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
    // A device or a FIFO is refused at once, not read until memory runs out.
    tokscope(home.path())
        .args(base)
        .arg(&model)
        .args(["-f", "/dev/zero"])
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is not a regular file"));
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

#[test]
fn config_show_prints_a_valid_config_with_round_values_and_sources() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config/config.toml");
    // `config init` writes the commented example, and refuses to replace it.
    tokscope(home.path())
        .args(["config", "init"])
        .assert()
        .success();
    let example = std::fs::read_to_string(&config).unwrap();
    assert!(example.contains("[sampling]") && example.contains("cache_type_k"));
    tokscope(home.path())
        .args(["config", "init"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("already exists"));
    std::fs::write(&config, "n_ctx = 777\n[sampling]\ntop_p = 0.9\n").unwrap();
    let out = tokscope(home.path())
        .args(["config", "show"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let shown = String::from_utf8(out.stdout).unwrap();
    assert!(shown.contains("n_ctx = 777  # from "), "{shown}");
    assert!(shown.contains("top_p = 0.9  # from "), "{shown}");
    assert!(shown.contains("temperature = 0.8  # default"), "{shown}");
    assert!(shown.contains("cache_type_k = \"f16\""), "{shown}");
    assert!(
        !shown.contains("[engine]") && !shown.contains("0.80000"),
        "{shown}"
    );
    // What it prints is a config tokscope reads back to the same settings.
    let again = home.path().join("again.toml");
    std::fs::write(&again, &shown).unwrap();
    let out2 = tokscope(home.path())
        .arg("--config")
        .arg(&again)
        .args(["config", "show"])
        .output()
        .unwrap();
    assert!(
        out2.status.success(),
        "{}",
        String::from_utf8_lossy(&out2.stderr)
    );
    let values = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split("  #").next().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(
        values(&String::from_utf8(out2.stdout).unwrap()),
        values(&shown)
    );
}
